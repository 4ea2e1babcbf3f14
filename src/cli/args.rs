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
}

impl Args {
    pub fn new(items: Vec<String>) -> Self {
        Args { items: items.into_iter().map(Some).collect() }
    }

    fn position_of(&self, names: &[&str]) -> Option<usize> {
        // Everything after a bare `--` is positional.
        let end = self.items.iter().position(|a| a.as_deref() == Some("--")).unwrap_or(self.items.len());
        self.items[..end].iter().position(|a| matches!(a, Some(a) if names.contains(&a.as_str())))
    }

    /// Whether a boolean flag (any of its spellings) is present; removes it.
    pub fn flag(&mut self, names: &[&str]) -> bool {
        let mut found = false;
        while let Some(i) = self.position_of(names) {
            self.items[i] = None;
            found = true;
        }
        found
    }

    /// The value of `--name VALUE` or `--name=VALUE` (the last one wins); removes it.
    pub fn value(&mut self, names: &[&str]) -> Result<Option<String>, UsageError> {
        Ok(self.values(names)?.pop())
    }

    /// Every value of a repeatable option, in order.
    pub fn values(&mut self, names: &[&str]) -> Result<Vec<String>, UsageError> {
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
                    Some(v) => out.push(v),
                    None => return Err(UsageError(format!("{item} needs a value"))),
                }
                self.items[i] = None;
            } else if let Some((name, v)) = item.split_once('=') {
                if names.contains(&name) {
                    out.push(v.to_owned());
                    self.items[i] = None;
                }
            }
            i += 1;
        }
        Ok(out)
    }

    /// A parsed option value.
    pub fn parsed<T: std::str::FromStr>(&mut self, names: &[&str]) -> Result<Option<T>, UsageError> {
        match self.value(names)? {
            None => Ok(None),
            Some(v) => {
                v.parse().map(Some).map_err(|_| UsageError(format!("{}: cannot read {v:?} as a value", names[0])))
            }
        }
    }

    /// The positionals left; an unknown `-x`/`--xyz` is an error.
    pub fn finish(self) -> Result<Vec<String>, UsageError> {
        let mut out = Vec::new();
        let mut after_dashdash = false;
        for item in self.items.into_iter().flatten() {
            if after_dashdash {
                out.push(item);
            } else if item == "--" {
                after_dashdash = true;
            } else if item.starts_with('-') && item.len() > 1 {
                return Err(UsageError(format!("unknown option {item}")));
            } else {
                out.push(item);
            }
        }
        Ok(out)
    }
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
        assert!(args("-n abc").parsed::<u32>(&["-n"]).is_err());
    }

    #[test]
    fn repeated_values_and_dashdash() {
        let mut a = args("--image a --image b -- --image");
        assert_eq!(a.values(&["--image"]).unwrap(), vec!["a", "b"]);
        assert_eq!(a.finish().unwrap(), vec!["--image"]);
    }
}
