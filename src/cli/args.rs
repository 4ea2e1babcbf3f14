//! A small command-line parser: flags are taken out by name, what is left must be positionals.

use std::fmt;

/// A usage error: the message and the command whose help applies.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The arguments of one subcommand, consumed as the command asks for them.
pub struct Args {
    items: Vec<Option<String>>,
    /// Every spelling the command asked for: what an unknown option is compared with.
    known: Vec<&'static str>,
}

impl Args {
    pub fn new(items: Vec<String>) -> Self {
        Args { items: items.into_iter().map(Some).collect(), known: Vec::new() }
    }

    fn position_of(&self, names: &[&str]) -> Option<usize> {
        // Everything after a bare `--` is positional.
        let end = self.items.iter().position(|a| a.as_deref() == Some("--")).unwrap_or(self.items.len());
        self.items[..end].iter().position(|a| matches!(a, Some(a) if names.contains(&a.as_str())))
    }

    /// Whether a boolean flag (any of its spellings) is present; removes it.
    pub fn flag(&mut self, names: &[&'static str]) -> bool {
        self.known.extend_from_slice(names);
        let mut found = false;
        while let Some(i) = self.position_of(names) {
            self.items[i] = None;
            found = true;
        }
        found
    }

    /// The value of `--name VALUE` or `--name=VALUE`; removes it. Given twice, it is refused:
    /// which one was meant is not for hrx to guess.
    pub fn value(&mut self, names: &[&'static str]) -> Result<Option<String>, UsageError> {
        Ok(self.single(names)?.map(|(_, v)| v))
    }

    /// The one value of a single-valued option, with its spelling.
    fn single(&mut self, names: &[&'static str]) -> Result<Option<(String, String)>, UsageError> {
        let mut given = self.spelled_values(names)?;
        match given.len() {
            0 | 1 => Ok(given.pop()),
            _ => Err(UsageError(format!(
                "{} given twice ({:?}, then {:?}): give it once",
                given[1].0, given[0].1, given[1].1
            ))),
        }
    }

    /// Every value of a repeatable option, in order.
    pub fn values(&mut self, names: &[&'static str]) -> Result<Vec<String>, UsageError> {
        Ok(self.spelled_values(names)?.into_iter().map(|(_, v)| v).collect())
    }

    /// Every value of an option with the spelling it was given with, in order.
    fn spelled_values(&mut self, names: &[&'static str]) -> Result<Vec<(String, String)>, UsageError> {
        self.known.extend_from_slice(names);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.items.len() {
            let Some(item) = self.items[i].clone() else {
                i += 1;
                continue;
            };
            if item == "--" {
                break;
            }
            if names.contains(&item.as_str()) {
                let value = self.items.get_mut(i + 1).and_then(Option::take);
                match value {
                    Some(v) => out.push((item, v)),
                    None => return Err(UsageError(format!("{item} needs a value"))),
                }
                self.items[i] = None;
            } else if let Some((name, v)) = item.split_once('=') {
                if names.contains(&name) {
                    out.push((name.to_owned(), v.to_owned()));
                    self.items[i] = None;
                }
            }
            i += 1;
        }
        Ok(out)
    }

    /// A parsed option value (refused given twice); an error names the spelling given.
    pub fn parsed<T: std::str::FromStr>(&mut self, names: &[&'static str]) -> Result<Option<T>, UsageError> {
        match self.single(names)? {
            None => Ok(None),
            Some((name, v)) => {
                v.parse().map(Some).map_err(|_| UsageError(format!("{name}: cannot read {v:?} as a value")))
            }
        }
    }

    /// The positionals left; an unknown `-x`/`--xyz` is an error that suggests the nearest
    /// spelling the command knows.
    pub fn finish(self) -> Result<Vec<String>, UsageError> {
        let mut out = Vec::new();
        let mut after_dashdash = false;
        for item in self.items.into_iter().flatten() {
            if after_dashdash {
                out.push(item);
            } else if item == "--" {
                after_dashdash = true;
            } else if item.starts_with('-') && item.len() > 1 {
                return Err(UsageError(unknown_option(&item, &self.known)));
            } else {
                out.push(item);
            }
        }
        Ok(out)
    }
}

/// "unknown option --tempurature; did you mean --temperature?" when a known spelling is a
/// likely typo of it (at most a third of the letters after the dashes off: `-x` gets no
/// guess), else just the first part.
pub fn unknown_option(item: &str, known: &[&str]) -> String {
    let name = item.split_once('=').map_or(item, |(name, _)| name);
    let letters = name.trim_start_matches('-').chars().count();
    let nearest = known.iter().map(|k| (edit_distance(name, k), *k)).min();
    match nearest {
        Some((d, k)) if d <= letters / 3 => format!("unknown option {name}; did you mean {k}?"),
        _ => format!("unknown option {name}"),
    }
}

/// Levenshtein distance over characters: insertions, deletions and substitutions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::new(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn takes_flags_values_and_positionals() {
        let mut a = args("a.gguf --json -n 5 --seed=7 b");
        assert!(a.flag(&["--json"]));
        assert_eq!(a.parsed::<u32>(&["-n"]).unwrap(), Some(5));
        assert_eq!(a.value(&["--seed"]).unwrap().as_deref(), Some("7"));
        assert_eq!(a.finish().unwrap(), vec!["a.gguf", "b"]);
    }

    #[test]
    fn unknown_option_and_missing_value_are_errors() {
        assert!(args("x --bogus").finish().is_err());
        assert!(args("-n").value(&["-n"]).is_err());
        let e = args("--n-predict abc").parsed::<u32>(&["-n", "--n-predict"]).unwrap_err();
        assert_eq!(e.0, "--n-predict: cannot read \"abc\" as a value");
    }

    #[test]
    fn an_unknown_option_suggests_the_nearest_known_one() {
        let mut a = args("x --tempurature 0.5");
        a.value(&["--temp", "--temperature"]).unwrap();
        a.flag(&["--json"]);
        let e = a.finish().unwrap_err().0;
        assert_eq!(e, "unknown option --tempurature; did you mean --temperature?");
        let mut a = args("--jsn=1");
        a.flag(&["--json"]);
        assert_eq!(a.finish().unwrap_err().0, "unknown option --jsn; did you mean --json?");
        // Nothing close: no guess.
        let mut a = args("--frobnicate");
        a.flag(&["--json"]);
        assert_eq!(a.finish().unwrap_err().0, "unknown option --frobnicate");
        let mut a = args("-x");
        a.value(&["-m"]).unwrap();
        assert_eq!(a.finish().unwrap_err().0, "unknown option -x");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn repeated_values_and_dashdash() {
        let mut a = args("--image a --image b -- --image");
        assert_eq!(a.values(&["--image"]).unwrap(), vec!["a", "b"]);
        assert_eq!(a.finish().unwrap(), vec!["--image"]);
    }
}
