//! Unified diffs of configs, for the summary and the logs.

use similar::TextDiff;

/// A unified diff (3 lines of context) from `old` to `new`; empty when they are equal.
pub fn unified(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_label, new_label)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\n", "a\n", "old", "new"), "");
    }

    #[test]
    fn changes_are_shown_as_a_unified_diff() {
        let diff = unified("a\nb\nc\n", "a\nB\nc\n", "s3://b/k", "rendered");
        assert_eq!(
            diff,
            "--- s3://b/k\n+++ rendered\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
    }
}
