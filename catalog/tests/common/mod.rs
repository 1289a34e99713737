//! What several of the catalog's test files share.

/// The columns the sink owns, in the order the catalog adds them after the payload's.
pub const RESERVED: [&str; 6] = [
    "_twg_emit_ts",
    "_twg_source_topic",
    "_twg_source_partition",
    "_twg_source_start",
    "_twg_source_end",
    "_twg_source_row",
];

/// `payload`, then the reserved columns: the column order of a table the catalog created.
pub fn with_reserved(payload: &[&'static str]) -> Vec<&'static str> {
    payload.iter().copied().chain(RESERVED).collect()
}
