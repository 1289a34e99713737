//! Where in the file a key was written: the line a refusal made after parsing (a bound, a
//! cross-field rule) names, as serde's own refusals do. A plain scan of the text for the key's
//! section (`[sink]`, the i-th `[[table]]`) and its `leaf =` line; a key that names a section
//! points at its header.

/// The 1-based line at which `key` (`sink.max_message_bytes`, `table[1].streams`,
/// `table[0].columns[2].type`, `catalog`) is written in `text`, if it is.
pub(super) fn line_of(text: &str, key: &str) -> Option<usize> {
    // "a, b" (a rule across two keys): the first.
    let key = key.split(", ").next()?;
    let mut parts = key.split('.');
    let (section, index) = indexed(parts.next()?);
    let leaf = parts.next().map(|l| indexed(l).0);
    let mut current: Option<(&str, usize)> = None;
    let mut seen_arrays: Vec<(&str, usize)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let name = name.trim();
            let i = match seen_arrays.iter_mut().find(|(a, _)| *a == name) {
                Some((_, count)) => {
                    *count += 1;
                    *count
                }
                None => {
                    seen_arrays.push((name, 0));
                    0
                }
            };
            current = Some((name, i));
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            current = Some((name.trim(), 0));
        } else {
            let here = current == Some((section, index.unwrap_or(0)));
            let written = line
                .split('=')
                .next()
                .map(str::trim)
                .is_some_and(|k| Some(k) == leaf);
            if here && written {
                return Some(n + 1);
            }
            continue;
        }
        if leaf.is_none() && current == Some((section, index.unwrap_or(0))) {
            return Some(n + 1);
        }
    }
    None
}

/// `table[2]` as (`table`, Some(2)); `sink` as (`sink`, None).
fn indexed(part: &str) -> (&str, Option<usize>) {
    match part.split_once('[') {
        Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
        None => (part, None),
    }
}

#[cfg(test)]
mod tests {
    use super::line_of;

    const TEXT: &str = "[sink]\nendpoint = \"http://x\"\nmax_message_bytes = 1\n\n[retry]\ninitial_backoff = \"9s\"\n\n[[table]]\nname = \"main.a.b\"\n\n[[table]]\nname = \"main.a.c\"\nstreams = 0\n";

    #[test]
    fn keys_are_found_in_their_section_and_table() {
        assert_eq!(line_of(TEXT, "sink.max_message_bytes"), Some(3));
        assert_eq!(
            line_of(TEXT, "retry.initial_backoff, retry.max_backoff"),
            Some(6)
        );
        assert_eq!(line_of(TEXT, "table[1].streams"), Some(13));
        assert_eq!(line_of(TEXT, "table[1].name"), Some(12));
        assert_eq!(line_of(TEXT, "table[0].name"), Some(9));
        assert_eq!(line_of(TEXT, "retry"), Some(5));
        // Not written (a default, or a section the file lacks): no line.
        assert_eq!(line_of(TEXT, "retry.max_backoff"), None);
        assert_eq!(line_of(TEXT, "table[0].streams"), None);
        assert_eq!(line_of(TEXT, "catalog"), None);
    }
}
