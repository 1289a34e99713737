//! The coverage table on Unity Catalog ([`CoverageLog`] for [`UnityCatalog`]), as ADR 0011
//! decided: a managed Delta table beside the raw table, appended with one `INSERT INTO … VALUES`
//! per save and read with a `SELECT` (`JSON_ARRAY` format, `INLINE` disposition, every chunk
//! fetched) through the Statement Execution API on the backend's warehouse. An `INSERT` is a
//! blind append, so concurrent sinks never conflict; a statement whose response was lost and is
//! retried appends the same ranges twice, which a load merges away.

use reqwest::Method;
use serde_json::json;
use zerobus_sink::CoverageRange;

use super::UnityCatalog;
use super::models::{ResultData, StatementResponse};
use crate::catalog::SinkId;
use crate::coverage::{CoverageLog, SavedRange};
use crate::ddl::{quote_ident, quote_literal, quote_table};
use crate::error::CatalogError;
use crate::table_ref::TableRef;

/// The columns a load selects, in order.
const SELECTED: [&str; 5] = [
    "sink",
    "_twg_source_topic",
    "_twg_source_partition",
    "_twg_source_start",
    "_twg_source_end",
];

/// At most this many chunks are fetched for one load (a loop guard: a coverage table is a few
/// rows per save).
const MAX_CHUNKS: usize = 100_000;

impl CoverageLog for UnityCatalog {
    async fn append_coverage(
        &self,
        table: &TableRef,
        sink: &SinkId,
        ranges: &[CoverageRange],
    ) -> Result<(), CatalogError> {
        let statement = insert(table, sink, ranges)?;
        self.execute(table, &statement).await
    }

    async fn read_coverage(
        &self,
        table: &TableRef,
        sink: Option<&SinkId>,
    ) -> Result<Vec<SavedRange>, CatalogError> {
        let mut statement = format!(
            "SELECT {} FROM {}",
            SELECTED.map(quote_ident).join(", "),
            quote_table(table)
        );
        if let Some(s) = sink {
            check_literal(table, "sink", &s.0)?;
            statement.push_str(&format!(
                " WHERE {} = {}",
                quote_ident("sink"),
                quote_literal(&s.0)
            ));
        }
        let rows = self.query(table, &statement, &SELECTED).await?;
        rows.into_iter()
            .map(|row| saved_range(table, row))
            .collect()
    }
}

impl UnityCatalog {
    /// Runs a query and returns every row of its result (`JSON_ARRAY`: strings or nulls), the
    /// chunks after the first fetched in order. The result must have the `columns` asked for,
    /// in order, and must not be truncated.
    async fn query(
        &self,
        table: &TableRef,
        statement: &str,
        columns: &[&str],
    ) -> Result<Vec<Vec<Option<String>>>, CatalogError> {
        let target = table.full_name();
        let fields = json!({ "format": "JSON_ARRAY", "disposition": "INLINE" });
        let response: StatementResponse = self.run(table, statement, Some(fields)).await?;
        let bad = |message: String| CatalogError::Decode {
            operation: "query",
            target: target.clone(),
            message,
        };
        let manifest = response
            .manifest
            .ok_or_else(|| bad("a SUCCEEDED query without a manifest".into()))?;
        if manifest.truncated == Some(true) {
            return Err(bad("the result was truncated (row or byte limit)".into()));
        }
        if let Some(format) = manifest.format.as_deref()
            && format != "JSON_ARRAY"
        {
            return Err(bad(format!("the result came as {format}, not JSON_ARRAY")));
        }
        let names: Vec<&str> = manifest
            .schema
            .as_ref()
            .map(|s| s.columns.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        if names.len() != columns.len()
            || names
                .iter()
                .zip(columns)
                .any(|(a, b)| !a.eq_ignore_ascii_case(b))
        {
            return Err(bad(format!(
                "the result has columns {names:?}, not {columns:?}"
            )));
        }
        let mut rows = Vec::new();
        let mut chunk = response.result;
        for _ in 0..MAX_CHUNKS {
            let Some(data) = chunk.take() else {
                return Ok(rows);
            };
            for row in &data.data_array {
                if row.len() != columns.len() {
                    return Err(bad(format!(
                        "a row has {} values, not {}",
                        row.len(),
                        columns.len()
                    )));
                }
            }
            rows.extend(data.data_array);
            let Some(next) = data.next_chunk_index else {
                return Ok(rows);
            };
            let path = format!(
                "/api/2.0/sql/statements/{}/result/chunks/{next}",
                response.statement_id
            );
            let (_, value) = self
                .call("fetch result chunk", &target, Method::GET, &path, None)
                .await?;
            chunk = Some(super::decode::<ResultData>(
                "fetch result chunk",
                &target,
                value,
            )?);
        }
        Err(bad(format!("more than {MAX_CHUNKS} result chunks")))
    }
}

/// The `INSERT` of one save: one row per range, every value a literal (ADR 0006), the save's
/// time the warehouse's.
fn insert(
    table: &TableRef,
    sink: &SinkId,
    ranges: &[CoverageRange],
) -> Result<String, CatalogError> {
    check_literal(table, "sink", &sink.0)?;
    let mut values = Vec::with_capacity(ranges.len());
    for (row, r) in ranges.iter().enumerate() {
        check_literal(table, "topic", &r.topic)?;
        // The column is a Delta INT: a partition beyond it cannot be saved, and is refused
        // rather than wrapped into another.
        let partition = i32::try_from(r.partition).map_err(|_| CatalogError::Delta {
            table: table.full_name(),
            operation: "save coverage",
            message: format!("partition {} does not fit the INT column", r.partition),
        })?;
        values.push(format!(
            "({}, current_timestamp(), {}, {partition}, {}, {}, {row})",
            quote_literal(&sink.0),
            quote_literal(&r.topic),
            r.start,
            r.end,
        ));
    }
    let columns = [
        "sink",
        "_twg_emit_ts",
        "_twg_source_topic",
        "_twg_source_partition",
        "_twg_source_start",
        "_twg_source_end",
        "_twg_source_row",
    ];
    Ok(format!(
        "INSERT INTO {} ({}) VALUES {}",
        quote_table(table),
        columns.map(quote_ident).join(", "),
        values.join(", ")
    ))
}

/// A sink name or topic must reach the table as it is: a control character the literal
/// escapes cannot carry (they carry newline, carriage return and tab) is refused.
fn check_literal(table: &TableRef, what: &str, text: &str) -> Result<(), CatalogError> {
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(CatalogError::Delta {
            table: table.full_name(),
            operation: "save coverage",
            message: format!(
                "the {what} {text:?} has a control character a SQL literal cannot carry"
            ),
        });
    }
    Ok(())
}

fn saved_range(table: &TableRef, row: Vec<Option<String>>) -> Result<SavedRange, CatalogError> {
    let bad = |message: String| CatalogError::Decode {
        operation: "load coverage",
        target: table.full_name(),
        message,
    };
    let mut values = row
        .into_iter()
        .zip(SELECTED)
        .map(|(v, name)| v.ok_or_else(|| bad(format!("a row has no {name}"))));
    let mut text = || {
        values
            .next()
            .unwrap_or_else(|| Err(bad("a short row".into())))
    };
    let sink = text()?;
    let topic = text()?;
    let mut number = |name: &str| -> Result<i64, CatalogError> {
        let v = text()?;
        v.trim()
            .parse()
            .map_err(|_| bad(format!("{name} {v:?} is not an integer")))
    };
    let partition = number("_twg_source_partition")?;
    let start = number("_twg_source_start")?;
    let end = number("_twg_source_end")?;
    Ok(SavedRange {
        sink,
        topic,
        partition,
        start,
        end,
    })
}
