//! The primary-raw role's preconditions (seed section 8): one test per unmet precondition of
//! each backend's shape, and the local ones end to end on real Delta tables.

use std::collections::{BTreeMap, BTreeSet};

use zerobus_sink_catalog::{LiveTable, PrimaryRawShape, Protocol, TableRef, Unmet};

/// A table that meets every precondition of `shape`.
fn eligible(shape: PrimaryRawShape) -> LiveTable {
    let features = |names: &[&str]| {
        names
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<_>>()
    };
    let protocol = match shape {
        PrimaryRawShape::IcebergCompatV2 => Protocol {
            min_reader_version: 3,
            min_writer_version: 7,
            reader_features: features(&["columnMapping"]),
            writer_features: features(&["columnMapping", "icebergCompatV2"]),
        },
        PrimaryRawShape::DeltaReadable => Protocol {
            min_reader_version: 1,
            min_writer_version: 2,
            reader_features: BTreeSet::new(),
            writer_features: BTreeSet::new(),
        },
    };
    LiveTable {
        table: TableRef::parse("main.raw.orders").unwrap(),
        columns: Vec::new(),
        comment: None,
        properties: shape
            .properties()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        table_id: None,
        storage_location: None,
        protocol: Some(protocol),
        table_type: Some("MANAGED".into()),
        data_source_format: Some("DELTA".into()),
    }
}

const SHAPES: [PrimaryRawShape; 2] = [
    PrimaryRawShape::IcebergCompatV2,
    PrimaryRawShape::DeltaReadable,
];

fn unmet(shape: PrimaryRawShape, change: impl FnOnce(&mut LiveTable)) -> Vec<Unmet> {
    let mut live = eligible(shape);
    change(&mut live);
    shape.check(Some(&live))
}

#[test]
fn an_eligible_table_meets_every_precondition_of_its_shape() {
    for shape in SHAPES {
        assert_eq!(shape.check(Some(&eligible(shape))), vec![], "{shape:?}");
    }
}

#[test]
fn precondition_registered_in_the_catalog() {
    for shape in SHAPES {
        let unmet = shape.check(None);
        assert_eq!(unmet, vec![Unmet::NotRegistered], "{shape:?}");
        assert_eq!(
            unmet[0].to_string(),
            "the table is not registered in the catalog"
        );
    }
}

#[test]
fn precondition_deletion_vectors_not_enabled() {
    for shape in SHAPES {
        let unmet = unmet(shape, |t| {
            t.properties
                .insert("delta.enableDeletionVectors".into(), "true".into());
        });
        assert_eq!(unmet, vec![Unmet::DeletionVectors], "{shape:?}");
        assert!(
            unmet[0]
                .to_string()
                .contains("deletion vectors are enabled")
        );
        // Unset is not "off": the role needs the property written down.
        let unset = self::unmet(shape, |t| {
            t.properties.remove("delta.enableDeletionVectors");
        });
        assert_eq!(
            unset,
            vec![Unmet::Property {
                key: "delta.enableDeletionVectors".into(),
                found: None,
                needed: "false".into()
            }],
            "{shape:?}"
        );
    }
}

#[test]
fn precondition_iceberg_reads_enabled() {
    let shape = PrimaryRawShape::IcebergCompatV2;
    let unmet = unmet(shape, |t| {
        t.properties
            .insert("delta.enableIcebergCompatV2".into(), "false".into());
        t.properties.remove("delta.universalFormat.enabledFormats");
    });
    assert_eq!(
        unmet,
        vec![
            Unmet::Property {
                key: "delta.enableIcebergCompatV2".into(),
                found: Some("false".into()),
                needed: "true".into()
            },
            Unmet::Property {
                key: "delta.universalFormat.enabledFormats".into(),
                found: None,
                needed: "iceberg".into()
            },
        ]
    );
    assert_eq!(
        unmet[0].to_string(),
        "delta.enableIcebergCompatV2 is \"false\", needs \"true\""
    );
    // The feature in the protocol, too.
    let unmet = self::unmet(shape, |t| {
        t.protocol
            .as_mut()
            .unwrap()
            .writer_features
            .remove("icebergCompatV2");
    });
    assert_eq!(
        unmet,
        vec![Unmet::MissingFeature {
            feature: "icebergCompatV2".into()
        }]
    );
}

#[test]
fn precondition_column_mapping_enabled() {
    let shape = PrimaryRawShape::IcebergCompatV2;
    let unmet = unmet(shape, |t| {
        t.properties
            .insert("delta.columnMapping.mode".into(), "none".into());
        t.protocol
            .as_mut()
            .unwrap()
            .writer_features
            .remove("columnMapping");
    });
    assert_eq!(
        unmet,
        vec![
            Unmet::Property {
                key: "delta.columnMapping.mode".into(),
                found: Some("none".into()),
                needed: "name".into()
            },
            Unmet::MissingFeature {
                feature: "columnMapping".into()
            },
        ]
    );
}

#[test]
fn precondition_protocol_versions_meet_the_feature_minimum() {
    let unmet = unmet(PrimaryRawShape::IcebergCompatV2, |t| {
        let p = t.protocol.as_mut().unwrap();
        p.min_reader_version = 1;
        p.min_writer_version = 4;
    });
    assert_eq!(
        unmet,
        vec![Unmet::Protocol {
            reader: 1,
            writer: 4,
            min_reader: 2,
            min_writer: 7
        }]
    );
    assert_eq!(
        unmet[0].to_string(),
        "protocol is reader 1 / writer 4, needs at least reader 2 / writer 7"
    );
}

#[test]
fn precondition_local_protocol_readable_by_the_shipped_reader() {
    let shape = PrimaryRawShape::DeltaReadable;
    let unmet = unmet(shape, |t| {
        let p = t.protocol.as_mut().unwrap();
        p.min_reader_version = 3;
        p.min_writer_version = 7;
        p.reader_features.insert("columnMapping".into());
    });
    assert_eq!(
        unmet,
        vec![Unmet::UnreadableFeature {
            feature: "columnMapping".into()
        }]
    );
    let newer = self::unmet(shape, |t| {
        t.protocol.as_mut().unwrap().min_reader_version = 4
    });
    assert_eq!(
        newer,
        vec![Unmet::UnreadableFeature {
            feature: "(reader version 4)".into()
        }]
    );
    // Features it reads are fine.
    let readable = self::unmet(shape, |t| {
        let p = t.protocol.as_mut().unwrap();
        p.min_reader_version = 3;
        p.reader_features.insert("timestampNtz".into());
    });
    assert_eq!(readable, vec![]);
}

#[cfg(feature = "local")]
mod local {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};
    use zerobus_sink_catalog::local::LocalDelta;
    use zerobus_sink_catalog::primary_raw::validate;
    use zerobus_sink_catalog::{
        DesiredTable, Policy, PrimaryRawError, PrimaryRawShape, Role, TableCatalog, TableRef, Unmet,
    };

    fn desired(table: &TableRef, role: Role) -> DesiredTable {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        DesiredTable::from_arrow(table.clone(), &schema, None, role).unwrap()
    }

    fn unmet(result: Result<impl std::fmt::Debug, PrimaryRawError>) -> Vec<Unmet> {
        match result {
            Err(PrimaryRawError::Unmet { unmet, .. }) => unmet,
            other => panic!("expected unmet preconditions, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn local_preconditions_end_to_end_on_real_delta_tables() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = LocalDelta::new(dir.path());
        let shape = PrimaryRawShape::DeltaReadable;
        let raw = TableRef::parse("main.raw.orders").unwrap();

        // Not registered: no table yet.
        let absent = validate(&catalog, &raw, shape).await;
        assert_eq!(unmet(absent), vec![Unmet::NotRegistered]);

        // Created for the role by the catalog: a proof for that table and shape.
        catalog
            .reconcile(&desired(&raw, Role::PrimaryRaw), &Policy::default())
            .await
            .unwrap();
        let proof = validate(&catalog, &raw, shape).await.unwrap();
        assert_eq!((proof.table(), proof.shape()), (&raw, shape));

        // An owner turns deletion vectors on: refused, and the error names it and the table.
        catalog
            .set_properties(
                &raw,
                [("delta.enableDeletionVectors".into(), "true".into())],
            )
            .await
            .unwrap();
        let flipped = validate(&catalog, &raw, shape).await;
        let message = flipped.as_ref().unwrap_err().to_string();
        assert!(
            message.starts_with(
                "main.raw.orders cannot hold the primary-raw role: deletion vectors are enabled"
            ),
            "{message}"
        );
        assert_eq!(unmet(flipped), vec![Unmet::DeletionVectors]);

        // A standard table never had the property written down.
        let standard = TableRef::parse("main.raw.events").unwrap();
        catalog
            .reconcile(&desired(&standard, Role::Standard), &Policy::default())
            .await
            .unwrap();
        assert_eq!(
            unmet(validate(&catalog, &standard, shape).await),
            vec![Unmet::Property {
                key: "delta.enableDeletionVectors".into(),
                found: None,
                needed: "false".into()
            }]
        );
    }
}
