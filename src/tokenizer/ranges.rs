//! Lookup in the generated range tables.

/// The value of the inclusive range `(first, last, value)` that contains `c`, if any.
/// `table` must be sorted and disjoint, as the generator writes it; one binary search.
pub(super) fn range_value<T: Copy>(table: &[(char, char, T)], c: char) -> Option<T> {
    let i = table.partition_point(|&(_, last, _)| last < c);
    table.get(i).filter(|&&(first, _, _)| first <= c).map(|&(_, _, v)| v)
}

#[cfg(test)]
mod tests {
    use super::range_value;

    #[test]
    fn finds_values_inside_ranges_only() {
        let t = [('b', 'd', 1u8), ('f', 'f', 2), ('x', 'z', 3)];
        let got: Vec<_> = "abcdefgwxyz{".chars().map(|c| range_value(&t, c)).collect();
        let want = [None, Some(1), Some(1), Some(1), None, Some(2), None, None, Some(3), Some(3), Some(3), None];
        assert_eq!(got, want);
        assert_eq!(range_value::<u8>(&[], 'a'), None);
    }
}
