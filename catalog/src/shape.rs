//! The shape a primary-raw table takes in each backend, and the pure check of a described
//! table against it (ADR 0009): below the plan, which creates tables in the shape, and the
//! catalog-facing validation above it ([`crate::primary_raw`]).

use crate::desired::{LOCAL_PRIMARY_RAW_PROPERTIES, PRIMARY_RAW_PROPERTIES};
use crate::live::{LiveTable, Protocol};
use crate::unmet::{DELETION_VECTORS, Unmet};

/// What a primary-raw table must be, which depends on how recovery reads it back (seed
/// section 8): the backend sets it (ADR 0009).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrimaryRawShape {
    /// Read back through Iceberg (Unity Catalog): IcebergCompatV2 with Iceberg as a universal
    /// format, column mapping by name, deletion vectors off ([`PRIMARY_RAW_PROPERTIES`]), and a
    /// protocol of at least reader 2, writer 7 with the `columnMapping` and `icebergCompatV2`
    /// features.
    #[default]
    IcebergCompatV2,
    /// Read back with delta-rs (the local backend): deletion vectors off
    /// ([`LOCAL_PRIMARY_RAW_PROPERTIES`]) and nothing the shipped reader cannot read (no
    /// column mapping). It claims no Iceberg reads: delta-rs can neither write nor (without
    /// datafusion) read a column-mapped table.
    DeltaReadable,
}

impl PrimaryRawShape {
    /// The properties a primary-raw table of this shape is created with.
    #[must_use]
    pub fn properties(self) -> &'static [(&'static str, &'static str)] {
        match self {
            PrimaryRawShape::IcebergCompatV2 => &PRIMARY_RAW_PROPERTIES,
            PrimaryRawShape::DeltaReadable => &LOCAL_PRIMARY_RAW_PROPERTIES,
        }
    }

    /// Every precondition of this shape the table as described does not meet (`None`: the
    /// catalog has no such table). Empty: the table may hold the role.
    #[must_use]
    pub fn check(self, live: Option<&LiveTable>) -> Vec<Unmet> {
        match live {
            Some(live) => self.unmet(live),
            None => vec![Unmet::NotRegistered],
        }
    }

    /// Every precondition of this shape that the existing table `live` does not meet.
    #[must_use]
    pub fn unmet(self, live: &LiveTable) -> Vec<Unmet> {
        let mut unmet = Vec::new();
        for (key, needed) in self.properties() {
            let found = live.properties.get(*key);
            if found.map(String::as_str) == Some(*needed) {
                continue;
            }
            if *key == DELETION_VECTORS && found.is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                unmet.push(Unmet::DeletionVectors);
            } else {
                unmet.push(Unmet::Property {
                    key: (*key).to_owned(),
                    found: found.cloned(),
                    needed: (*needed).to_owned(),
                });
            }
        }
        let Some(p) = &live.protocol else {
            return unmet;
        };
        match self {
            PrimaryRawShape::IcebergCompatV2 => {
                let (min_reader, min_writer) = (2, 7);
                if p.min_reader_version < min_reader || p.min_writer_version < min_writer {
                    unmet.push(Unmet::Protocol {
                        reader: p.min_reader_version,
                        writer: p.min_writer_version,
                        min_reader,
                        min_writer,
                    });
                }
                for feature in ["columnMapping", "icebergCompatV2"] {
                    if !p.writer_features.contains(feature) {
                        unmet.push(Unmet::MissingFeature {
                            feature: feature.to_owned(),
                        });
                    }
                }
            }
            PrimaryRawShape::DeltaReadable => {
                if let Some(feature) = unreadable(p) {
                    unmet.push(Unmet::UnreadableFeature { feature });
                }
            }
        }
        unmet
    }
}

/// A reader feature of `p` the shipped delta-rs reader (no datafusion) cannot read, if any.
fn unreadable(p: &Protocol) -> Option<String> {
    const READABLE: [&str; 5] = [
        "timestampNtz",
        "deletionVectors",
        "variantType",
        "variantType-preview",
        "v2Checkpoint",
    ];
    if p.min_reader_version > 3 {
        return Some(format!("(reader version {})", p.min_reader_version));
    }
    p.reader_features
        .iter()
        .find(|f| !READABLE.contains(&f.as_str()))
        .cloned()
}
