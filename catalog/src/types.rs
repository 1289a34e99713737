//! The type map: Arrow types to Delta / Unity Catalog types and back, and which changes are
//! lossless widenings (Delta's type-widening feature).
//!
//! | Arrow | Delta (`type_text`) | UC `type_name` |
//! |---|---|---|
//! | Boolean | boolean | BOOLEAN |
//! | Int8 / Int16 / Int32 / Int64 | tinyint / smallint / int / bigint | BYTE / SHORT / INT / LONG |
//! | Float32 / Float64 | float / double | FLOAT / DOUBLE |
//! | Utf8, LargeUtf8, Utf8View | string | STRING |
//! | Binary, LargeBinary, BinaryView | binary | BINARY |
//! | Date32 | date | DATE |
//! | Timestamp(µs, Some(tz)) | timestamp (UTC instant) | TIMESTAMP |
//! | Timestamp(µs, None) | timestamp_ntz | TIMESTAMP_NTZ |
//! | Decimal128(p ≤ 38, s) | decimal(p,s) | DECIMAL |
//! | List, LargeList | `array<T>` | ARRAY |
//! | Struct | `struct<...>` | STRUCT |
//! | Map | `map<K,V>` | MAP |
//! | Dictionary(_, V) | as V (dictionaries are hydrated on the wire) | |
//!
//! Everything else (unsigned integers, Float16, Date64, other timestamp units, times,
//! durations, intervals, fixed-size types, unions, Decimal256, nulls) is an
//! [`CatalogError::UnmappableType`] naming the column and saying what to cast to.

use arrow_schema::{DataType, Field, Fields, TimeUnit};
use serde_json::{Value, json};

use crate::error::CatalogError;
use crate::table_ref::is_identifier_safe;

/// A Delta Lake (Spark) data type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the names are Delta's
pub enum DeltaType {
    Boolean,
    Byte,
    Short,
    Integer,
    Long,
    Float,
    Double,
    String,
    Binary,
    Date,
    Timestamp,
    TimestampNtz,
    Decimal {
        precision: u8,
        scale: u8,
    },
    Array {
        element: Box<DeltaType>,
        contains_null: bool,
    },
    Map {
        key: Box<DeltaType>,
        value: Box<DeltaType>,
        value_contains_null: bool,
    },
    Struct(Vec<DeltaField>),
    /// Semi-structured values (`VARIANT`). Arrow has no variant type: it is read and written as
    /// the Parquet variant encoding, a struct of two binary fields `metadata` and `value`,
    /// marked with the extension name [`VARIANT_EXTENSION`] on the field.
    Variant,
    /// A type this crate does not know, as the catalog wrote it (e.g. `geography(4326)`): kept
    /// so that a table with such a column can still be described and given credentials; a plan
    /// never changes such a column.
    Unknown(String),
}

/// The Arrow extension name that marks a field as a Delta `VARIANT` (a struct of `metadata`
/// and `value` binaries in the Parquet variant encoding).
pub const VARIANT_EXTENSION: &str = "arrow.parquet.variant";

/// A field of a Delta struct.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeltaField {
    /// The field's name.
    pub name: String,
    /// Its type.
    pub data_type: DeltaType,
    /// Whether it may be null.
    pub nullable: bool,
}

/// Whether a column type may change to another in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Widening {
    /// The types are the same.
    Same,
    /// Every value of the old type is exactly a value of the new one, and Delta's type
    /// widening supports the change.
    Lossless,
    /// Not a lossless widening Delta supports; the reason says why.
    Refused(&'static str),
}

fn unmappable(column: &str, data_type: &DataType, reason: impl Into<String>) -> CatalogError {
    CatalogError::UnmappableType {
        column: column.to_owned(),
        arrow_type: data_type.to_string(),
        reason: reason.into(),
    }
}

impl DeltaType {
    /// The Delta type for an Arrow type; `column` (a dotted path for nested fields) names the
    /// column in the error.
    pub fn from_arrow(column: &str, data_type: &DataType) -> Result<DeltaType, CatalogError> {
        use DataType as A;
        Ok(match data_type {
            A::Boolean => DeltaType::Boolean,
            A::Int8 => DeltaType::Byte,
            A::Int16 => DeltaType::Short,
            A::Int32 => DeltaType::Integer,
            A::Int64 => DeltaType::Long,
            A::Float32 => DeltaType::Float,
            A::Float64 => DeltaType::Double,
            A::Utf8 | A::LargeUtf8 | A::Utf8View => DeltaType::String,
            A::Binary | A::LargeBinary | A::BinaryView => DeltaType::Binary,
            A::Date32 => DeltaType::Date,
            A::Timestamp(TimeUnit::Microsecond, Some(_)) => DeltaType::Timestamp,
            A::Timestamp(TimeUnit::Microsecond, None) => DeltaType::TimestampNtz,
            A::Timestamp(..) => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta timestamps are microseconds: cast to Timestamp(Microsecond, ..)",
                ));
            }
            A::Decimal128(p, s) if *p <= 38 && *s >= 0 && (*s as u8) <= *p => DeltaType::Decimal {
                precision: *p,
                scale: *s as u8,
            },
            A::Decimal128(..) => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta decimals need 1 <= precision <= 38 and 0 <= scale <= precision",
                ));
            }
            A::Decimal256(..) => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta decimals are at most 38 digits: cast to Decimal128",
                ));
            }
            A::UInt8 | A::UInt16 | A::UInt32 | A::UInt64 => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta has no unsigned integers: cast to a signed type one size up (UInt64 to Decimal128(20, 0))",
                ));
            }
            A::Float16 => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta has no half floats: cast to Float32",
                ));
            }
            A::Date64 => {
                return Err(unmappable(
                    column,
                    data_type,
                    "Delta dates are days: cast to Date32",
                ));
            }
            A::Null => {
                return Err(unmappable(
                    column,
                    data_type,
                    "a column of nulls has no Delta type: give it the type it will hold",
                ));
            }
            A::List(f) | A::LargeList(f) | A::ListView(f) | A::LargeListView(f) => {
                DeltaType::Array {
                    element: Box::new(DeltaType::from_arrow(
                        &format!("{column}.element"),
                        f.data_type(),
                    )?),
                    contains_null: f.is_nullable(),
                }
            }
            A::Struct(fields) => DeltaType::Struct(
                fields
                    .iter()
                    .map(|f| {
                        let path = format!("{column}.{}", f.name());
                        if !is_identifier_safe(f.name()) {
                            return Err(unmappable(
                                &path,
                                data_type,
                                "field names must be ASCII letters, digits or underscores",
                            ));
                        }
                        Ok(DeltaField {
                            name: f.name().clone(),
                            data_type: DeltaType::from_arrow(&path, f.data_type())?,
                            nullable: f.is_nullable(),
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
            A::Map(entries, _) => {
                let A::Struct(kv) = entries.data_type() else {
                    return Err(unmappable(
                        column,
                        data_type,
                        "map entries must be a struct of key and value",
                    ));
                };
                let [key, value] = kv.iter().collect::<Vec<_>>()[..] else {
                    return Err(unmappable(
                        column,
                        data_type,
                        "map entries must have exactly a key and a value",
                    ));
                };
                DeltaType::Map {
                    key: Box::new(DeltaType::from_arrow(
                        &format!("{column}.key"),
                        key.data_type(),
                    )?),
                    value: Box::new(DeltaType::from_arrow(
                        &format!("{column}.value"),
                        value.data_type(),
                    )?),
                    value_contains_null: value.is_nullable(),
                }
            }
            A::Dictionary(_, value) => DeltaType::from_arrow(column, value)?,
            other => {
                return Err(unmappable(
                    column,
                    other,
                    "no Delta type holds it: cast it to one (see the type map)",
                ));
            }
        })
    }

    /// The Arrow type the service expects for this Delta type (strings as Utf8, timestamps as
    /// microseconds, UTC for `timestamp`).
    #[must_use]
    pub fn to_arrow(&self) -> DataType {
        match self {
            DeltaType::Boolean => DataType::Boolean,
            DeltaType::Byte => DataType::Int8,
            DeltaType::Short => DataType::Int16,
            DeltaType::Integer => DataType::Int32,
            DeltaType::Long => DataType::Int64,
            DeltaType::Float => DataType::Float32,
            DeltaType::Double => DataType::Float64,
            DeltaType::String => DataType::Utf8,
            DeltaType::Binary => DataType::Binary,
            DeltaType::Date => DataType::Date32,
            DeltaType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DeltaType::TimestampNtz => DataType::Timestamp(TimeUnit::Microsecond, None),
            DeltaType::Decimal { precision, scale } => {
                DataType::Decimal128(*precision, *scale as i8)
            }
            DeltaType::Array {
                element,
                contains_null,
            } => DataType::List(Field::new("element", element.to_arrow(), *contains_null).into()),
            DeltaType::Map {
                key,
                value,
                value_contains_null,
            } => {
                let entries = Fields::from(vec![
                    Field::new("key", key.to_arrow(), false),
                    Field::new("value", value.to_arrow(), *value_contains_null),
                ]);
                DataType::Map(
                    Field::new("key_value", DataType::Struct(entries), false).into(),
                    false,
                )
            }
            DeltaType::Struct(fields) => DataType::Struct(
                fields
                    .iter()
                    .map(|f| Field::new(&f.name, f.data_type.to_arrow(), f.nullable))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            DeltaType::Variant => DataType::Struct(
                vec![
                    Field::new("metadata", DataType::Binary, false),
                    Field::new("value", DataType::Binary, false),
                ]
                .into(),
            ),
            // No Arrow type can be written to it.
            DeltaType::Unknown(_) => DataType::Null,
        }
    }

    /// Unity Catalog's `type_name`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            DeltaType::Boolean => "BOOLEAN",
            DeltaType::Byte => "BYTE",
            DeltaType::Short => "SHORT",
            DeltaType::Integer => "INT",
            DeltaType::Long => "LONG",
            DeltaType::Float => "FLOAT",
            DeltaType::Double => "DOUBLE",
            DeltaType::String => "STRING",
            DeltaType::Binary => "BINARY",
            DeltaType::Date => "DATE",
            DeltaType::Timestamp => "TIMESTAMP",
            DeltaType::TimestampNtz => "TIMESTAMP_NTZ",
            DeltaType::Decimal { .. } => "DECIMAL",
            DeltaType::Array { .. } => "ARRAY",
            DeltaType::Map { .. } => "MAP",
            DeltaType::Struct(_) => "STRUCT",
            DeltaType::Variant => "VARIANT",
            DeltaType::Unknown(_) => "USER_DEFINED_TYPE",
        }
    }

    /// Unity Catalog's `type_text` (Spark's simple string), e.g. `array<struct<a:int>>`.
    #[must_use]
    pub fn type_text(&self) -> String {
        match self {
            DeltaType::Byte => "tinyint".into(),
            DeltaType::Short => "smallint".into(),
            DeltaType::Integer => "int".into(),
            DeltaType::Long => "bigint".into(),
            DeltaType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            DeltaType::Array { element, .. } => format!("array<{}>", element.type_text()),
            DeltaType::Map { key, value, .. } => {
                format!("map<{},{}>", key.type_text(), value.type_text())
            }
            DeltaType::Struct(fields) => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|f| format!("{}:{}", f.name, f.data_type.type_text()))
                    .collect();
                format!("struct<{}>", inner.join(","))
            }
            DeltaType::Unknown(text) => text.clone(),
            other => other.type_name().to_ascii_lowercase(),
        }
    }

    /// The type in a SQL statement, nested field names quoted, e.g. ``ARRAY<STRUCT<`a`: INT>>``.
    #[must_use]
    pub fn ddl(&self) -> String {
        match self {
            DeltaType::Byte => "TINYINT".into(),
            DeltaType::Short => "SMALLINT".into(),
            DeltaType::Long => "BIGINT".into(),
            DeltaType::Decimal { precision, scale } => format!("DECIMAL({precision},{scale})"),
            DeltaType::Array { element, .. } => format!("ARRAY<{}>", element.ddl()),
            DeltaType::Map { key, value, .. } => format!("MAP<{}, {}>", key.ddl(), value.ddl()),
            DeltaType::Struct(fields) => {
                let inner: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        format!(
                            "{}: {}",
                            crate::table_ref::quote_ident(&f.name),
                            f.data_type.ddl()
                        )
                    })
                    .collect();
                format!("STRUCT<{}>", inner.join(", "))
            }
            DeltaType::Unknown(text) => text.to_ascii_uppercase(),
            other => other.type_name().to_owned(),
        }
    }

    /// The type in Spark's JSON schema format (the `type` of a `type_json` field).
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            DeltaType::Decimal { precision, scale } => {
                json!(format!("decimal({precision},{scale})"))
            }
            DeltaType::Array {
                element,
                contains_null,
            } => {
                json!({"type": "array", "elementType": element.to_json(), "containsNull": contains_null})
            }
            DeltaType::Map {
                key,
                value,
                value_contains_null,
            } => json!({
                "type": "map", "keyType": key.to_json(), "valueType": value.to_json(), "valueContainsNull": value_contains_null
            }),
            DeltaType::Struct(fields) => json!({
                "type": "struct",
                "fields": fields.iter().map(|f| field_json(&f.name, &f.data_type, f.nullable, None)).collect::<Vec<_>>()
            }),
            DeltaType::Integer => json!("integer"),
            DeltaType::Unknown(text) => json!(text),
            other => json!(other.type_name().to_ascii_lowercase()),
        }
    }

    /// Parses a type as a catalog describes it, keeping a type this crate does not know as
    /// [`DeltaType::Unknown`] rather than failing (a describe must not fail on one column).
    #[must_use]
    pub fn from_json_lenient(value: &Value) -> DeltaType {
        DeltaType::from_json(value).unwrap_or_else(|_| {
            DeltaType::Unknown(match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
    }

    /// Parses a type in Spark's JSON schema format (also accepts the simple names UC uses).
    pub fn from_json(value: &Value) -> Result<DeltaType, String> {
        match value {
            Value::String(name) => DeltaType::from_simple_name(name),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("array") => Ok(DeltaType::Array {
                    element: Box::new(DeltaType::from_json(
                        o.get("elementType").ok_or("array without elementType")?,
                    )?),
                    contains_null: o
                        .get("containsNull")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                }),
                Some("map") => Ok(DeltaType::Map {
                    key: Box::new(DeltaType::from_json(
                        o.get("keyType").ok_or("map without keyType")?,
                    )?),
                    value: Box::new(DeltaType::from_json(
                        o.get("valueType").ok_or("map without valueType")?,
                    )?),
                    value_contains_null: o
                        .get("valueContainsNull")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                }),
                Some("struct") => {
                    let fields = o
                        .get("fields")
                        .and_then(Value::as_array)
                        .ok_or("struct without fields")?;
                    Ok(DeltaType::Struct(
                        fields
                            .iter()
                            .map(field_from_json)
                            .collect::<Result<_, _>>()?,
                    ))
                }
                Some(other) => DeltaType::from_simple_name(other),
                None => Err(format!("type object without a type: {value}")),
            },
            other => Err(format!("not a type: {other}")),
        }
    }

    fn from_simple_name(name: &str) -> Result<DeltaType, String> {
        let lower = name.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "boolean" => DeltaType::Boolean,
            "byte" | "tinyint" => DeltaType::Byte,
            "short" | "smallint" => DeltaType::Short,
            "integer" | "int" => DeltaType::Integer,
            "long" | "bigint" => DeltaType::Long,
            "float" | "real" => DeltaType::Float,
            "double" => DeltaType::Double,
            "string" => DeltaType::String,
            "binary" => DeltaType::Binary,
            "date" => DeltaType::Date,
            "timestamp" | "timestamp_ltz" => DeltaType::Timestamp,
            "timestamp_ntz" => DeltaType::TimestampNtz,
            "variant" => DeltaType::Variant,
            "decimal" => DeltaType::Decimal {
                precision: 10,
                scale: 0,
            },
            s if s.starts_with("varchar(") || s.starts_with("char(") => DeltaType::String,
            s if s.starts_with("decimal(") && s.ends_with(')') => {
                let inner = &s["decimal(".len()..s.len() - 1];
                let (p, sc) = inner
                    .split_once(',')
                    .ok_or_else(|| format!("bad decimal {name}"))?;
                let precision: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad decimal precision in {name}"))?;
                let scale: u8 = sc
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad decimal scale in {name}"))?;
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(format!("decimal out of range: {name}"));
                }
                DeltaType::Decimal { precision, scale }
            }
            _ => return Err(format!("unknown Delta type {name:?}")),
        })
    }

    /// The type as the DDL this crate renders can express it: nested fields, array elements and
    /// map values nullable. (Top-level `NOT NULL` is kept.) Comparisons between a wanted and a
    /// live schema are made on this form, so that re-syncing is idempotent.
    #[must_use]
    pub fn loosened(&self) -> DeltaType {
        match self {
            DeltaType::Array { element, .. } => DeltaType::Array {
                element: Box::new(element.loosened()),
                contains_null: true,
            },
            DeltaType::Map { key, value, .. } => DeltaType::Map {
                key: Box::new(key.loosened()),
                value: Box::new(value.loosened()),
                value_contains_null: true,
            },
            DeltaType::Struct(fields) => DeltaType::Struct(
                fields
                    .iter()
                    .map(|f| DeltaField {
                        name: f.name.clone(),
                        data_type: f.data_type.loosened(),
                        nullable: true,
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Whether a column of type `self` may be changed in place to `to` without losing a value,
    /// as Delta's type widening allows (ALTER COLUMN ... TYPE): integers to a wider integer, to
    /// a decimal with enough integer digits, or (up to 32 bits) to double; float to double;
    /// decimal to more precision and scale (`p + k1, s + k2` with `k1 >= k2 >= 0`); date to
    /// timestamp_ntz. `bigint` to `double` is refused: a double holds 53 bits exactly.
    #[must_use]
    pub fn can_widen_to(&self, to: &DeltaType) -> Widening {
        if matches!(self, DeltaType::Unknown(_)) || matches!(to, DeltaType::Unknown(_)) {
            return Widening::Refused("a type this crate does not know never changes");
        }
        if self.loosened() == to.loosened() {
            return Widening::Same;
        }
        if let Some(widening) = self.widen_forward(to) {
            return widening;
        }
        if to.widen_forward(self) == Some(Widening::Lossless) {
            return Widening::Refused("narrowing");
        }
        Widening::Refused("the types are incompatible")
    }

    /// The widening from `self` to `to` if Delta knows the pair in this direction.
    fn widen_forward(&self, to: &DeltaType) -> Option<Widening> {
        use DeltaType as D;
        let int_digits = |t: &D| match t {
            D::Byte => Some(3u8),
            D::Short => Some(5),
            D::Integer => Some(10),
            D::Long => Some(19),
            _ => None,
        };
        Some(match (self, to) {
            (D::Byte, D::Short | D::Integer | D::Long)
            | (D::Short, D::Integer | D::Long)
            | (D::Integer, D::Long) => Widening::Lossless,
            (D::Byte | D::Short | D::Integer, D::Double)
            | (D::Float, D::Double)
            | (D::Date, D::TimestampNtz) => Widening::Lossless,
            (D::Long, D::Double) => {
                Widening::Refused("bigint to double loses precision above 2^53")
            }
            (from, D::Decimal { precision, scale }) if int_digits(from).is_some() => {
                // Delta's minimum targets: decimal(10,0) for byte/short/int, decimal(20,0) for long.
                let needed = if matches!(from, D::Long) { 20 } else { 10 };
                if precision.saturating_sub(*scale) >= needed {
                    Widening::Lossless
                } else {
                    Widening::Refused("the decimal has too few integer digits for the integer type")
                }
            }
            (
                D::Decimal {
                    precision: p,
                    scale: s,
                },
                D::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => {
                if p2 >= p && s2 >= s && (p2 - p) >= (s2 - s) {
                    Widening::Lossless
                } else {
                    Widening::Refused(
                        "a decimal may only gain precision at least as much as it gains scale",
                    )
                }
            }
            _ => return None,
        })
    }
}

/// A field in Spark's JSON schema format; `comment` goes in its metadata.
#[must_use]
pub fn field_json(
    name: &str,
    data_type: &DeltaType,
    nullable: bool,
    comment: Option<&str>,
) -> Value {
    let metadata = match comment {
        Some(c) => json!({ "comment": c }),
        None => json!({}),
    };
    json!({ "name": name, "type": data_type.to_json(), "nullable": nullable, "metadata": metadata })
}

fn field_from_json(value: &Value) -> Result<DeltaField, String> {
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or("struct field without a name")?;
    let data_type = DeltaType::from_json(value.get("type").ok_or("struct field without a type")?)?;
    let nullable = value
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    Ok(DeltaField {
        name: name.to_owned(),
        data_type,
        nullable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_type() -> Vec<(DataType, &'static str)> {
        let kv = Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Int64, true),
        ]);
        vec![
            (DataType::Boolean, "boolean"),
            (DataType::Int8, "tinyint"),
            (DataType::Int16, "smallint"),
            (DataType::Int32, "int"),
            (DataType::Int64, "bigint"),
            (DataType::Float32, "float"),
            (DataType::Float64, "double"),
            (DataType::LargeUtf8, "string"),
            (DataType::Binary, "binary"),
            (DataType::Date32, "date"),
            (
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                "timestamp",
            ),
            (
                DataType::Timestamp(TimeUnit::Microsecond, None),
                "timestamp_ntz",
            ),
            (DataType::Decimal128(10, 2), "decimal(10,2)"),
            (
                DataType::List(Field::new("item", DataType::Utf8, true).into()),
                "array<string>",
            ),
            (
                DataType::Struct(
                    vec![
                        Field::new("a", DataType::Int32, false),
                        Field::new("b", DataType::Utf8, true),
                    ]
                    .into(),
                ),
                "struct<a:int,b:string>",
            ),
            (
                DataType::Map(
                    Field::new("entries", DataType::Struct(kv), false).into(),
                    false,
                ),
                "map<string,bigint>",
            ),
            (
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                "string",
            ),
        ]
    }

    #[test]
    fn every_accepted_type_maps_and_round_trips_through_json_and_arrow() {
        for (arrow, text) in every_type() {
            let delta = DeltaType::from_arrow("c", &arrow).unwrap();
            assert_eq!(delta.type_text(), text, "{arrow}");
            assert_eq!(
                DeltaType::from_json(&delta.to_json()).unwrap(),
                delta,
                "{arrow} via json"
            );
            assert_eq!(
                DeltaType::from_arrow("c", &delta.to_arrow()).unwrap(),
                delta,
                "{arrow} via arrow"
            );
            assert_eq!(
                DeltaType::from_json(&json!(delta.type_text())).is_ok(),
                !text.contains('<'),
                "{text}"
            );
        }
    }

    #[test]
    fn unmappable_types_are_named_errors() {
        for arrow in [
            DataType::UInt32,
            DataType::Float16,
            DataType::Date64,
            DataType::Null,
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::Decimal256(40, 2),
            DataType::Duration(TimeUnit::Second),
        ] {
            let err = DeltaType::from_arrow("orders.amount", &arrow)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("orders.amount") && err.contains(&arrow.to_string()),
                "{err}"
            );
        }
        let nested = DataType::Struct(vec![Field::new("bad-name", DataType::Int32, true)].into());
        let err = DeltaType::from_arrow("c", &nested).unwrap_err().to_string();
        assert!(err.contains("c.bad-name"), "{err}");
    }

    #[test]
    fn widening_follows_delta_and_refuses_loss() {
        use DeltaType as D;
        let dec = |p, s| D::Decimal {
            precision: p,
            scale: s,
        };
        let ok = [
            (D::Byte, D::Short),
            (D::Short, D::Long),
            (D::Integer, D::Long),
            (D::Integer, D::Double),
            (D::Float, D::Double),
            (D::Date, D::TimestampNtz),
            (D::Integer, dec(10, 0)),
            (D::Long, dec(20, 0)),
            (dec(10, 1), dec(12, 3)),
        ];
        for (from, to) in ok {
            assert_eq!(
                from.can_widen_to(&to),
                Widening::Lossless,
                "{from:?} -> {to:?}"
            );
        }
        let refused = [
            (D::Long, D::Double),
            (D::Long, D::Integer),
            (D::Double, D::Float),
            (D::Long, dec(19, 0)),
            (dec(10, 1), dec(11, 3)),
            (D::String, D::Long),
            (D::Integer, D::String),
            (D::Timestamp, D::TimestampNtz),
        ];
        for (from, to) in refused {
            assert!(
                matches!(from.can_widen_to(&to), Widening::Refused(_)),
                "{from:?} -> {to:?}"
            );
        }
        assert_eq!(
            D::Long.can_widen_to(&D::Integer),
            Widening::Refused("narrowing")
        );
        assert_eq!(D::Long.can_widen_to(&D::Long), Widening::Same);
    }
}
