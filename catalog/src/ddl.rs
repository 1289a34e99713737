//! Databricks SQL rendered from a plan. Identifiers and literals are quoted and escaped so that
//! no name or comment can end a statement or start another.
//!
//! The statements keep to forms that both Databricks SQL and an independent parser (the
//! `sqlparser` crate's Databricks dialect, used in the tests) accept:
//!
//! - `CREATE TABLE t (...) TBLPROPERTIES (...)`, without `USING DELTA` (Delta is the default
//!   table format on Databricks; the parser's dialect does not take `USING`);
//! - the table comment through `ALTER TABLE t SET TBLPROPERTIES ('comment' = ...)` (the parser
//!   takes neither `COMMENT ON` nor `COMMENT` next to `TBLPROPERTIES`);
//! - one `ADD COLUMN` per column; column comments through `CHANGE COLUMN c c TYPE COMMENT ...`;
//!   widening through `ALTER COLUMN c TYPE t`;
//! - nested struct fields without `NOT NULL` or comments (see [`DeltaType::loosened`]).
//!
//! String literals escape `\` and `'` with a backslash, and newline, carriage return and tab as
//! `\n`, `\r`, `\t`: the escapes Databricks and the parser decode alike. Other control
//! characters become spaces.

use crate::error::CatalogError;
use crate::plan::{Action, ReconcilePlan};
use crate::table_ref::TableRef;
use crate::types::DeltaType;

pub use crate::table_ref::quote_ident;

/// A single-quoted string literal (see the module docs for the escapes).
#[must_use]
pub fn quote_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The table's quoted three-part name.
#[must_use]
pub fn quote_table(table: &TableRef) -> String {
    format!(
        "{}.{}.{}",
        quote_ident(table.catalog()),
        quote_ident(table.schema()),
        quote_ident(table.table())
    )
}

fn column_def(name: &str, data_type: &DeltaType, nullable: bool, comment: Option<&str>) -> String {
    let mut s = format!("{} {}", quote_ident(name), data_type.ddl());
    if !nullable {
        s.push_str(" NOT NULL");
    }
    if let Some(c) = comment {
        s.push_str(" COMMENT ");
        s.push_str(&quote_literal(c));
    }
    s
}

fn properties(pairs: &[(String, String)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{} = {}", quote_literal(k), quote_literal(v)))
        .collect();
    format!("TBLPROPERTIES ({})", inner.join(", "))
}

/// The statements that execute `plan`, in order; an error if the plan refuses anything.
pub fn render(plan: &ReconcilePlan) -> Result<Vec<String>, CatalogError> {
    let refusals = plan.refusals();
    if !refusals.is_empty() {
        return Err(CatalogError::Refused {
            table: plan.table.full_name(),
            refusals,
        });
    }
    let t = quote_table(&plan.table);
    let mut out = Vec::new();
    let mut props: Vec<(String, String)> = Vec::new();
    for action in &plan.actions {
        match action {
            Action::CreateTable {
                columns,
                comment,
                properties: p,
            } => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        column_def(
                            &c.name,
                            &c.data_type,
                            c.nullable,
                            c.comment.as_ref().map(|c| c.text.as_str()),
                        )
                    })
                    .collect();
                let pairs: Vec<(String, String)> =
                    p.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                let mut create = format!("CREATE TABLE IF NOT EXISTS {t} ({})", cols.join(", "));
                if !pairs.is_empty() {
                    create.push(' ');
                    create.push_str(&properties(&pairs));
                }
                out.push(create);
                if let Some(c) = comment {
                    props.push(("comment".to_owned(), c.clone()));
                }
            }
            Action::AddColumn(c) => {
                let def = column_def(
                    &c.name,
                    &c.data_type,
                    true,
                    c.comment.as_ref().map(|c| c.text.as_str()),
                );
                out.push(format!("ALTER TABLE {t} ADD COLUMN {def}"));
            }
            Action::WidenColumn { column, to, .. } => {
                flush(&t, &mut props, &mut out);
                out.push(format!(
                    "ALTER TABLE {t} ALTER COLUMN {} TYPE {}",
                    quote_ident(column),
                    to.ddl()
                ));
            }
            Action::SetColumnComment {
                column,
                data_type,
                comment,
            } => {
                let q = quote_ident(column);
                out.push(format!(
                    "ALTER TABLE {t} CHANGE COLUMN {q} {q} {} COMMENT {}",
                    data_type.ddl(),
                    quote_literal(comment)
                ));
            }
            Action::SetTableComment(c) => props.push(("comment".to_owned(), c.clone())),
            Action::SetProperty { key, value } => props.push((key.clone(), value.clone())),
            Action::Refuse(_) => {}
        }
    }
    flush(&t, &mut props, &mut out);
    Ok(out)
}

/// Emits the pending properties as one statement.
fn flush(t: &str, props: &mut Vec<(String, String)>, out: &mut Vec<String>) {
    if !props.is_empty() {
        out.push(format!("ALTER TABLE {t} SET {}", properties(props)));
        props.clear();
    }
}
