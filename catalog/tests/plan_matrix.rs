//! The plan matrix (seed section 5.1.4): every decision of the pure planner, no network.

mod common;

use common::with_reserved;

use std::collections::BTreeMap;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use zerobus_sink_catalog::plan::{TABLE_COMMENT_HASH, comment_hash, comment_hash_key};
use zerobus_sink_catalog::{
    Action, Contract, DeltaType, DesiredTable, HumanEdits, LiveColumn, LiveTable, Policy,
    RefusalReason, Role, TableRef, Unmet, plan,
};

fn table() -> TableRef {
    TableRef::parse("main.bronze.orders").unwrap()
}

fn schema(fields: Vec<Field>) -> Schema {
    Schema::new(fields)
}

fn contract() -> Contract {
    Contract {
        column_descriptions: BTreeMap::from([
            ("id".into(), "Order id".into()),
            ("amount".into(), "Amount in cents".into()),
        ]),
        table_description: Some("Orders, raw".into()),
        owner: Some("data-eng".into()),
        uri: Some("https://contracts.example/orders".into()),
        version: Some("3".into()),
        source_topic: Some("orders".into()),
    }
}

fn desired(fields: Vec<Field>, contract: Option<&Contract>, role: Role) -> DesiredTable {
    DesiredTable::from_arrow(table(), &schema(fields), contract, role).unwrap()
}

fn base_fields() -> Vec<Field> {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int32, true),
    ]
}

/// What a backend's table looks like after executing `plan` on `live` (a model of a catalog).
fn apply(live: Option<LiveTable>, plan: &zerobus_sink_catalog::ReconcilePlan) -> LiveTable {
    let mut t = live.unwrap_or(LiveTable {
        table: plan.table.clone(),
        columns: Vec::new(),
        comment: None,
        properties: BTreeMap::new(),
        table_id: None,
        storage_location: None,
        protocol: None,
        table_type: Some("MANAGED".into()),
        data_source_format: Some("DELTA".into()),
    });
    for a in &plan.actions {
        match a {
            Action::CreateTable {
                columns,
                comment,
                properties,
            } => {
                t.columns = columns
                    .iter()
                    .map(|c| LiveColumn {
                        name: c.name.clone(),
                        data_type: c.data_type.clone(),
                        nullable: c.nullable,
                        comment: c.comment.as_ref().map(|c| c.text.clone()),
                    })
                    .collect();
                t.comment = comment.clone();
                t.properties = properties.clone();
            }
            Action::AddColumn(c) => t.columns.push(LiveColumn {
                name: c.name.clone(),
                data_type: c.data_type.clone(),
                nullable: true,
                comment: c.comment.as_ref().map(|c| c.text.clone()),
            }),
            Action::WidenColumn { column, to, .. } => {
                t.columns
                    .iter_mut()
                    .find(|c| &c.name == column)
                    .unwrap()
                    .data_type = to.clone();
            }
            Action::SetColumnComment {
                column, comment, ..
            } => {
                t.columns
                    .iter_mut()
                    .find(|c| &c.name == column)
                    .unwrap()
                    .comment = Some(comment.clone());
            }
            Action::SetTableComment(c) => t.comment = Some(c.clone()),
            Action::SetProperty { key, value } => {
                t.properties.insert(key.clone(), value.clone());
            }
            Action::Refuse(r) => panic!("applied a refused plan: {r}"),
            _ => panic!("unknown action"),
        }
    }
    t
}

/// The live table right after creating `desired` from nothing.
fn created(desired: &DesiredTable) -> LiveTable {
    apply(None, &plan(None, desired, &Policy::default()))
}

fn refusal_reasons(
    p: &zerobus_sink_catalog::ReconcilePlan,
) -> Vec<(Option<String>, RefusalReason)> {
    p.refusals()
        .into_iter()
        .map(|r| (r.column, r.reason))
        .collect()
}

#[test]
fn absent_table_is_created_from_the_schema_with_reserved_columns_comments_and_properties() {
    let d = desired(base_fields(), Some(&contract()), Role::Standard);
    let p = plan(None, &d, &Policy::default());
    let [
        Action::CreateTable {
            columns,
            comment,
            properties,
        },
    ] = p.actions.as_slice()
    else {
        panic!("{p}")
    };
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, with_reserved(&["id", "amount"]));
    assert_eq!(columns[0].data_type, DeltaType::Long);
    assert_eq!(columns[0].comment.as_ref().unwrap().text, "Order id");
    assert!(
        columns[2]
            .comment
            .as_ref()
            .unwrap()
            .text
            .contains("emitted"),
        "engine-owned description"
    );
    assert_eq!(comment.as_deref(), Some("Orders, raw"));
    assert_eq!(properties["twg.managed"], "true");
    assert_eq!(properties["twg.owner"], "data-eng");
    assert_eq!(properties["twg.source.topic"], "orders");
    assert_eq!(
        properties[&comment_hash_key("id")],
        comment_hash("Order id")
    );
    assert_eq!(properties[TABLE_COMMENT_HASH], comment_hash("Orders, raw"));
}

#[test]
fn without_a_contract_payload_columns_get_no_comment_and_reserved_ones_still_do() {
    let d = desired(base_fields(), None, Role::Standard);
    assert!(d.columns[0].comment.is_none());
    assert!(d.columns[2].comment.is_some());
}

#[test]
fn reconciling_twice_plans_nothing_the_second_time() {
    let d = desired(base_fields(), Some(&contract()), Role::Standard);
    let first = plan(None, &d, &Policy::default());
    let live = apply(None, &first);
    let second = plan(Some(&live), &d, &Policy::default());
    assert!(second.is_noop(), "{second}");
}

#[test]
fn an_added_column_is_added_with_its_comment_and_recorded() {
    let c = contract();
    let live = created(&desired(base_fields(), Some(&c), Role::Standard));
    let mut c2 = c.clone();
    c2.column_descriptions
        .insert("currency".into(), "ISO 4217 code".into());
    let mut fields = base_fields();
    fields.push(Field::new("currency", DataType::Utf8, false));
    let p = plan(
        Some(&live),
        &desired(fields, Some(&c2), Role::Standard),
        &Policy::default(),
    );
    assert!(
        matches!(&p.actions[0], Action::AddColumn(col) if col.name == "currency" && col.comment.as_ref().unwrap().text == "ISO 4217 code")
    );
    assert!(p.actions.contains(&Action::SetProperty {
        key: comment_hash_key("currency"),
        value: comment_hash("ISO 4217 code")
    }));
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("currency is added nullable")),
        "{p}"
    );
    assert!(
        plan(
            Some(&apply(Some(live), &p)),
            &desired(base_fields_with_currency(), Some(&c2), Role::Standard),
            &Policy::default()
        )
        .is_noop()
    );
}

fn base_fields_with_currency() -> Vec<Field> {
    let mut f = base_fields();
    f.push(Field::new("currency", DataType::Utf8, false));
    f
}

#[test]
fn a_lossless_widening_needs_the_opt_in() {
    let live = created(&desired(base_fields(), None, Role::Standard));
    let wider = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int64, true),
    ];
    let refused = plan(
        Some(&live),
        &desired(wider.clone(), None, Role::Standard),
        &Policy::default(),
    );
    assert_eq!(
        refusal_reasons(&refused),
        vec![(
            Some("amount".into()),
            RefusalReason::WideningNotAllowed {
                live: "int".into(),
                wanted: "bigint".into()
            }
        )]
    );
    let allowed = plan(
        Some(&live),
        &desired(wider, None, Role::Standard),
        &Policy {
            allow_widening: true,
            ..Policy::default()
        },
    );
    assert_eq!(
        allowed.actions[0],
        Action::SetProperty {
            key: "delta.enableTypeWidening".into(),
            value: "true".into()
        }
    );
    assert_eq!(
        allowed.actions[1],
        Action::WidenColumn {
            column: "amount".into(),
            from: DeltaType::Integer,
            to: DeltaType::Long
        }
    );
}

#[test]
fn narrowing_lossy_conflicting_and_removed_required_columns_are_refused_by_name() {
    let fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int64, true),
        Field::new("ratio", DataType::Int64, true),
        Field::new("label", DataType::Utf8, true),
    ];
    let live = created(&desired(fields, None, Role::Standard));
    let wanted = vec![
        // `id` is missing, and NOT NULL in the table: removal is refused.
        Field::new("amount", DataType::Int32, true), // narrowing
        Field::new("ratio", DataType::Float64, true), // bigint to double: lossy
        Field::new("label", DataType::Int32, true),  // type conflict
    ];
    let p = plan(
        Some(&live),
        &desired(wanted, None, Role::Standard),
        &Policy {
            allow_widening: true,
            ..Policy::default()
        },
    );
    let reasons = refusal_reasons(&p);
    assert!(
        p.actions.iter().all(|a| matches!(a, Action::Refuse(_))),
        "a refusing plan carries nothing else: {p}"
    );
    assert!(reasons.contains(&(
        Some("amount".into()),
        RefusalReason::Narrowing {
            live: "bigint".into(),
            wanted: "int".into()
        }
    )));
    assert!(reasons.iter().any(|(c, r)| c.as_deref() == Some("ratio")
        && matches!(r, RefusalReason::TypeConflict { why, .. } if why.contains("2^53"))));
    assert!(
        reasons.iter().any(|(c, r)| c.as_deref() == Some("label")
            && matches!(r, RefusalReason::TypeConflict { .. }))
    );
    assert!(reasons.contains(&(Some("id".into()), RefusalReason::RequiredColumnMissing)));
    assert!(
        p.to_string()
            .contains("REFUSE column amount: narrowing from bigint to int"),
        "{p}"
    );
}

#[test]
fn a_nullable_column_missing_from_the_batches_stays_and_is_noted() {
    let live = created(&desired(base_fields(), None, Role::Standard));
    let p = plan(
        Some(&live),
        &desired(
            vec![Field::new("id", DataType::Int64, false)],
            None,
            Role::Standard,
        ),
        &Policy::default(),
    );
    assert!(p.is_noop(), "{p}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("amount is not in the batches"))
    );
}

#[test]
fn nulls_into_a_not_null_column_are_refused() {
    let live = created(&desired(base_fields(), None, Role::Standard));
    let p = plan(
        Some(&live),
        &desired(
            vec![Field::new("id", DataType::Int64, true)],
            None,
            Role::Standard,
        ),
        &Policy::default(),
    );
    assert_eq!(
        refusal_reasons(&p),
        vec![(Some("id".into()), RefusalReason::NullabilityConflict)]
    );
}

#[test]
fn a_changed_contract_description_is_written_once() {
    let c = contract();
    let live = created(&desired(base_fields(), Some(&c), Role::Standard));
    let mut c2 = c.clone();
    c2.column_descriptions
        .insert("amount".into(), "Amount in minor units".into());
    let p = plan(
        Some(&live),
        &desired(base_fields(), Some(&c2), Role::Standard),
        &Policy::default(),
    );
    assert_eq!(p.actions.len(), 2, "{p}");
    assert!(
        matches!(&p.actions[0], Action::SetColumnComment { column, comment, .. } if column == "amount" && comment == "Amount in minor units")
    );
    let again = apply(Some(live), &p);
    assert!(
        plan(
            Some(&again),
            &desired(base_fields(), Some(&c2), Role::Standard),
            &Policy::default()
        )
        .is_noop()
    );
}

#[test]
fn a_human_edit_to_a_managed_comment_is_detected_and_the_policy_decides() {
    let c = contract();
    let d = desired(base_fields(), Some(&c), Role::Standard);
    let mut live = apply(None, &plan(None, &d, &Policy::default()));
    live.columns[0].comment = Some("Order id (see wiki)".into());
    let respect = plan(Some(&live), &d, &Policy::default());
    assert!(respect.is_noop(), "{respect}");
    assert!(
        respect
            .notes
            .iter()
            .any(|n| n.contains("id: comment edited by a person"))
    );
    let restore = plan(
        Some(&live),
        &d,
        &Policy {
            human_edits: HumanEdits::Restore,
            ..Policy::default()
        },
    );
    assert!(
        matches!(&restore.actions[0], Action::SetColumnComment { column, comment, .. } if column == "id" && comment == "Order id")
    );
}

#[test]
fn a_primary_raw_table_is_created_iceberg_readable_with_deletion_vectors_off() {
    let p = plan(
        None,
        &desired(base_fields(), None, Role::PrimaryRaw),
        &Policy::default(),
    );
    let [Action::CreateTable { properties, .. }] = p.actions.as_slice() else {
        panic!("{p}")
    };
    assert_eq!(properties["delta.enableIcebergCompatV2"], "true");
    assert_eq!(
        properties["delta.universalFormat.enabledFormats"],
        "iceberg"
    );
    assert_eq!(properties["delta.columnMapping.mode"], "name");
    assert_eq!(properties["delta.enableDeletionVectors"], "false");
    assert!(
        plan(
            Some(&apply(None, &p)),
            &desired(base_fields(), None, Role::PrimaryRaw),
            &Policy::default()
        )
        .is_noop()
    );
}

#[test]
fn an_existing_table_with_deletion_vectors_is_refused_the_primary_raw_role() {
    let mut live = created(&desired(base_fields(), None, Role::Standard));
    live.properties
        .insert("delta.enableDeletionVectors".into(), "true".into());
    let p = plan(
        Some(&live),
        &desired(base_fields(), None, Role::PrimaryRaw),
        &Policy::default(),
    );
    let reasons = refusal_reasons(&p);
    let [(None, RefusalReason::PrimaryRawPreconditions { unmet })] = reasons.as_slice() else {
        panic!("{p}")
    };
    assert!(unmet.contains(&Unmet::DeletionVectors), "{unmet:?}");
    assert_eq!(unmet.len(), 4);
}

#[test]
fn bad_columns_are_named_errors() {
    let t = table();
    let err = |fields: Vec<Field>| {
        DesiredTable::from_arrow(t.clone(), &schema(fields), None, Role::Standard)
            .unwrap_err()
            .to_string()
    };
    assert!(err(vec![Field::new("_twg_emit_ts", DataType::Int64, true)]).contains("reserved"));
    assert!(err(vec![Field::new("a b", DataType::Int64, true)]).contains("\"a b\""));
    assert!(
        err(vec![
            Field::new("Id", DataType::Int64, true),
            Field::new("id", DataType::Int64, true)
        ])
        .contains("twice")
    );
    let e = err(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    )]);
    assert!(e.contains("column ts") && e.contains("microseconds"), "{e}");
}

/// Columns of every type that a widening can change (Iceberg follows some of them).
fn narrow_fields() -> Vec<Field> {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("amount", DataType::Int32, true),
        Field::new("ratio", DataType::Float32, true),
        Field::new("price", DataType::Decimal128(10, 2), true),
        Field::new("day", DataType::Date32, true),
    ]
}

#[test]
fn on_an_iceberg_readable_table_only_widenings_iceberg_can_follow_are_planned() {
    let live = created(&desired(narrow_fields(), None, Role::PrimaryRaw));
    assert_eq!(live.properties["delta.enableIcebergCompatV2"], "true");
    let widen = Policy {
        allow_widening: true,
        ..Policy::default()
    };
    let wanted = |amount: DataType, price: DataType, day: DataType| {
        desired(
            vec![
                Field::new("id", DataType::Int64, false),
                Field::new("amount", amount, true),
                Field::new("ratio", DataType::Float64, true),
                Field::new("price", price, true),
                Field::new("day", day, true),
            ],
            None,
            Role::PrimaryRaw,
        )
    };
    // int -> long, float -> double, decimal precision up at the same scale: Iceberg V2 follows.
    let ok = plan(
        Some(&live),
        &wanted(
            DataType::Int64,
            DataType::Decimal128(14, 2),
            DataType::Date32,
        ),
        &widen,
    );
    assert!(ok.refusals().is_empty(), "{ok}");
    let widened: Vec<&str> = ok
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::WidenColumn { column, .. } => Some(column.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(widened, ["amount", "ratio", "price"]);
    // Widenings Delta allows but Iceberg V2 cannot follow are refused, each named.
    let refused = plan(
        Some(&live),
        &wanted(
            DataType::Float64,
            DataType::Decimal128(14, 4),
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
        &widen,
    );
    let reasons = refusal_reasons(&refused);
    let columns: Vec<&str> = reasons
        .iter()
        .filter(|(_, r)| matches!(r, RefusalReason::IcebergCannotFollow { .. }))
        .filter_map(|(c, _)| c.as_deref())
        .collect();
    assert_eq!(columns, ["amount", "price", "day"], "{refused}");
    // The same widenings on a table without Iceberg reads are planned.
    let plain = created(&desired(narrow_fields(), None, Role::Standard));
    let d = DesiredTable {
        role: Role::Standard,
        ..wanted(
            DataType::Float64,
            DataType::Decimal128(14, 4),
            DataType::Timestamp(TimeUnit::Microsecond, None),
        )
    };
    let p = plan(Some(&plain), &d, &widen);
    assert!(p.refusals().is_empty(), "{p}");
}
