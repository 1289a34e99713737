//! The reconcile plan: a pure value saying what to change so that a live table takes a wanted
//! one, or why it must not (seed section 5.1.1-5.1.2). Computed without a network, logged,
//! unit-tested, then executed by a backend.
//!
//! Comment management: every comment this crate writes is recorded as a content hash in a table
//! property (`twg.comment_hash.<column>`, `twg.comment_hash.table`), with `twg.managed=true`.
//! A re-sync writes a comment only when its text changed, so a second reconcile plans nothing.
//! A live comment whose hash differs from the recorded one was edited by a person: the
//! [`HumanEdits`] policy decides whether to respect or restore it.

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};

pub use crate::refusal::{Refusal, RefusalReason};

use crate::desired::{DesiredColumn, DesiredTable, PRIMARY_RAW_PROPERTIES, Role};
use crate::live::LiveTable;
use crate::shape::PrimaryRawShape;
use crate::table_ref::{TableRef, is_identifier_safe};
use crate::types::{DeltaType, Widening};

/// Property marking a table as managed by this crate.
pub const MANAGED: &str = "twg.managed";
/// Property enabling Delta type widening (needed before a widening ALTER).
pub const TYPE_WIDENING: &str = "delta.enableTypeWidening";

/// The property recording the hash of a managed column comment.
#[must_use]
pub fn comment_hash_key(column: &str) -> String {
    format!("twg.comment_hash.{}", column.to_ascii_lowercase())
}

/// The property recording the hash of the managed table comment.
pub const TABLE_COMMENT_HASH: &str = "twg.comment_hash.table";

/// The content hash recorded for a managed comment: 16 hex digits of SHA-256.
#[must_use]
pub fn comment_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// What to do with a managed comment a person has edited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HumanEdits {
    /// Leave the person's text (and say so in the plan's notes).
    #[default]
    Respect,
    /// Put the authority's text back.
    Restore,
}

/// Choices the plan cannot make by itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Whether lossless widenings may be applied (off by default: they upgrade the table's
    /// protocol).
    pub allow_widening: bool,
    /// What to do with comments a person edited.
    pub human_edits: HumanEdits,
    /// What a primary-raw table must be (set by the backend: Iceberg for Unity Catalog,
    /// delta-rs readable for the local backend).
    pub primary_raw: PrimaryRawShape,
}

/// Whether Iceberg readers of a table can follow a widening Delta allows: Iceberg V2 widens int
/// to long (Delta's byte and short are Iceberg ints), float to double, and a decimal's
/// precision at the same scale; nothing else.
fn iceberg_follows(from: &DeltaType, to: &DeltaType) -> bool {
    use DeltaType as D;
    match (from, to) {
        (D::Byte | D::Short | D::Integer, D::Integer | D::Long) | (D::Float, D::Double) => true,
        (
            D::Decimal {
                precision: p,
                scale: s,
            },
            D::Decimal {
                precision: q,
                scale: t,
            },
        ) => s == t && q >= p,
        _ => false,
    }
}

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Create the table.
    CreateTable {
        /// Its columns, with their comments.
        columns: Vec<DesiredColumn>,
        /// Its description.
        comment: Option<String>,
        /// Its properties (including the managed-comment hashes).
        properties: BTreeMap<String, String>,
    },
    /// Add a column (always nullable: existing rows have no value), with its comment.
    AddColumn(DesiredColumn),
    /// Change a column's type to a wider one.
    WidenColumn {
        /// The column.
        column: String,
        /// Its type now.
        from: DeltaType,
        /// Its new type.
        to: DeltaType,
    },
    /// Set a column's comment.
    SetColumnComment {
        /// The column.
        column: String,
        /// Its type (the statement restates it).
        data_type: DeltaType,
        /// The comment.
        comment: String,
    },
    /// Set the table's description.
    SetTableComment(String),
    /// Set a table property.
    SetProperty {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Refuse: nothing in the plan may be executed.
    Refuse(Refusal),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::CreateTable {
                columns,
                properties,
                ..
            } => {
                write!(
                    f,
                    "create table ({} columns, {} properties)",
                    columns.len(),
                    properties.len()
                )
            }
            Action::AddColumn(c) => write!(f, "add column {} {}", c.name, c.data_type.type_text()),
            Action::WidenColumn { column, from, to } => write!(
                f,
                "widen {column} {} -> {}",
                from.type_text(),
                to.type_text()
            ),
            Action::SetColumnComment { column, .. } => write!(f, "set comment of {column}"),
            Action::SetTableComment(_) => write!(f, "set table comment"),
            Action::SetProperty { key, value } => write!(f, "set property {key}={value}"),
            Action::Refuse(r) => write!(f, "REFUSE {r}"),
        }
    }
}

/// The changes that make a live table the wanted one: a pure value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilePlan {
    /// The table.
    pub table: TableRef,
    /// The changes, in the order to apply them.
    pub actions: Vec<Action>,
    /// Things the plan noticed and chose to leave (for the log).
    pub notes: Vec<String>,
}

impl ReconcilePlan {
    /// Whether there is nothing to do.
    #[must_use]
    pub fn is_noop(&self) -> bool {
        self.actions.is_empty()
    }

    /// The refusals, if any; a plan with refusals must not be executed.
    #[must_use]
    pub fn refusals(&self) -> Vec<Refusal> {
        self.actions
            .iter()
            .filter_map(|a| {
                if let Action::Refuse(r) = a {
                    Some(r.clone())
                } else {
                    None
                }
            })
            .collect()
    }
}

impl fmt::Display for ReconcilePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reconcile {}:", self.table)?;
        if self.actions.is_empty() {
            write!(f, " nothing to do")?;
        }
        for a in &self.actions {
            write!(f, "\n  {a}")?;
        }
        for n in &self.notes {
            write!(f, "\n  note: {n}")?;
        }
        Ok(())
    }
}

/// Plans the changes that make `live` (None: absent) take `desired`, under `policy`.
#[must_use]
pub fn plan(live: Option<&LiveTable>, desired: &DesiredTable, policy: &Policy) -> ReconcilePlan {
    let mut p = ReconcilePlan {
        table: desired.table.clone(),
        actions: Vec::new(),
        notes: Vec::new(),
    };
    // The service writes only ASCII identifiers (the table's name is one by construction of
    // its `TableRef`): a column it could never write is neither created nor added.
    let unwritable: Vec<Action> = desired
        .columns
        .iter()
        .filter(|c| !is_identifier_safe(&c.name))
        .map(|c| {
            Action::Refuse(Refusal {
                column: Some(c.name.clone()),
                reason: RefusalReason::ColumnName,
            })
        })
        .collect();
    if !unwritable.is_empty() {
        p.actions = unwritable;
        return p;
    }
    let Some(live) = live else {
        let mut properties = desired.properties.clone();
        properties.insert(MANAGED.to_owned(), "true".to_owned());
        if desired.role == Role::PrimaryRaw {
            for (k, v) in policy.primary_raw.properties() {
                properties.insert((*k).to_owned(), (*v).to_owned());
            }
        }
        for c in &desired.columns {
            if let Some(comment) = &c.comment {
                properties.insert(comment_hash_key(&c.name), comment_hash(&comment.text));
            }
        }
        if let Some(comment) = &desired.comment {
            properties.insert(TABLE_COMMENT_HASH.to_owned(), comment_hash(comment));
        }
        p.actions.push(Action::CreateTable {
            columns: desired.columns.clone(),
            comment: desired.comment.clone(),
            properties,
        });
        return p;
    };
    let mut refusals = Vec::new();
    let mut widen = Vec::new();
    let mut adds = Vec::new();
    let mut comments = Vec::new();
    let mut properties: BTreeMap<String, String> = BTreeMap::new();

    if desired.role == Role::PrimaryRaw {
        let unmet = policy.primary_raw.unmet(live);
        if !unmet.is_empty() {
            refusals.push(Refusal {
                column: None,
                reason: RefusalReason::PrimaryRawPreconditions { unmet },
            });
        }
    }

    for d in &desired.columns {
        let Some(l) = live.column(&d.name) else {
            if !d.nullable {
                p.notes.push(format!(
                    "column {} is added nullable: existing rows have no value",
                    d.name
                ));
            }
            if let Some(c) = &d.comment {
                properties.insert(comment_hash_key(&d.name), comment_hash(&c.text));
            }
            adds.push(Action::AddColumn(d.clone()));
            continue;
        };
        let (live_type, wanted) = (l.data_type.loosened(), d.data_type.loosened());
        let names = || (live_type.type_text(), wanted.type_text());
        if let DeltaType::Unknown(type_text) = &live_type {
            refusals.push(Refusal {
                column: Some(d.name.clone()),
                reason: RefusalReason::UnknownLiveType {
                    type_text: type_text.clone(),
                },
            });
            continue;
        }
        let iceberg = live
            .properties
            .get("delta.enableIcebergCompatV2")
            .is_some_and(|v| v == "true");
        match live_type.can_widen_to(&wanted) {
            Widening::Same => {}
            Widening::Lossless if iceberg && !iceberg_follows(&live_type, &wanted) => {
                let (live, wanted) = names();
                refusals.push(Refusal {
                    column: Some(d.name.clone()),
                    reason: RefusalReason::IcebergCannotFollow { live, wanted },
                });
            }
            Widening::Lossless if policy.allow_widening => {
                widen.push(Action::WidenColumn {
                    column: l.name.clone(),
                    from: live_type.clone(),
                    to: wanted.clone(),
                });
            }
            Widening::Lossless => {
                let (live, wanted) = names();
                refusals.push(Refusal {
                    column: Some(d.name.clone()),
                    reason: RefusalReason::WideningNotAllowed { live, wanted },
                });
            }
            Widening::Refused("narrowing") => {
                let (live, wanted) = names();
                refusals.push(Refusal {
                    column: Some(d.name.clone()),
                    reason: RefusalReason::Narrowing { live, wanted },
                });
            }
            Widening::Refused(why) => {
                let (live, wanted) = names();
                refusals.push(Refusal {
                    column: Some(d.name.clone()),
                    reason: RefusalReason::TypeConflict { live, wanted, why },
                });
            }
        }
        if !l.nullable && d.nullable {
            refusals.push(Refusal {
                column: Some(d.name.clone()),
                reason: RefusalReason::NullabilityConflict,
            });
        }
        if let Some(c) = &d.comment {
            match sync(
                &comment_hash_key(&d.name),
                &c.text,
                l.comment.as_deref(),
                live,
                policy,
            ) {
                Sync::Write => {
                    comments.push(Action::SetColumnComment {
                        column: l.name.clone(),
                        data_type: wanted.clone(),
                        comment: c.text.clone(),
                    });
                    properties.insert(comment_hash_key(&d.name), comment_hash(&c.text));
                }
                Sync::Keep => {}
                Sync::Respect => p.notes.push(format!(
                    "column {}: comment edited by a person; left as is",
                    d.name
                )),
            }
        }
    }
    for l in &live.columns {
        if desired
            .columns
            .iter()
            .any(|d| d.name.eq_ignore_ascii_case(&l.name))
        {
            continue;
        }
        if l.nullable {
            p.notes.push(format!(
                "column {} is not in the batches; it stays (nullable)",
                l.name
            ));
        } else {
            refusals.push(Refusal {
                column: Some(l.name.clone()),
                reason: RefusalReason::RequiredColumnMissing,
            });
        }
    }
    if let Some(text) = &desired.comment {
        match sync(
            TABLE_COMMENT_HASH,
            text,
            live.comment.as_deref(),
            live,
            policy,
        ) {
            Sync::Write => {
                comments.push(Action::SetTableComment(text.clone()));
                properties.insert(TABLE_COMMENT_HASH.to_owned(), comment_hash(text));
            }
            Sync::Keep => {}
            Sync::Respect => p
                .notes
                .push("table comment edited by a person; left as is".to_owned()),
        }
    }
    for (k, v) in desired
        .properties
        .iter()
        .chain([(&MANAGED.to_owned(), &"true".to_owned())])
    {
        let role_property = PRIMARY_RAW_PROPERTIES.iter().any(|(rk, _)| rk == k);
        if !role_property && live.properties.get(k) != Some(v) {
            properties.insert(k.clone(), v.clone());
        }
    }

    if !refusals.is_empty() {
        p.actions = refusals.into_iter().map(Action::Refuse).collect();
        return p;
    }
    if !widen.is_empty() && live.properties.get(TYPE_WIDENING).map(String::as_str) != Some("true") {
        p.actions.push(Action::SetProperty {
            key: TYPE_WIDENING.to_owned(),
            value: "true".to_owned(),
        });
    }
    p.actions.extend(widen);
    p.actions.extend(adds);
    p.actions.extend(comments);
    p.actions.extend(
        properties
            .into_iter()
            .map(|(key, value)| Action::SetProperty { key, value }),
    );
    p
}

enum Sync {
    Write,
    Keep,
    Respect,
}

/// Whether to write the managed comment `wanted` (recorded under `key`) over `live_text`.
fn sync(
    key: &str,
    wanted: &str,
    live_text: Option<&str>,
    live: &LiveTable,
    policy: &Policy,
) -> Sync {
    let wanted_hash = comment_hash(wanted);
    let recorded = live.properties.get(key);
    let live_hash = live_text.map(comment_hash);
    if live_hash.as_ref() == Some(&wanted_hash) {
        // Already the wanted text; record it if it is not recorded.
        return if recorded == Some(&wanted_hash) {
            Sync::Keep
        } else {
            Sync::Write
        };
    }
    let edited_by_person = match (recorded, &live_hash) {
        (Some(recorded), Some(live_hash)) => recorded != live_hash,
        (Some(_), None) => true,
        (None, Some(_)) => true,
        (None, None) => false,
    };
    match (edited_by_person, policy.human_edits) {
        (true, HumanEdits::Respect) => Sync::Respect,
        _ => Sync::Write,
    }
}
