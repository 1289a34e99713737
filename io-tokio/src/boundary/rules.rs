//! The rules: for one incoming Arrow type and the type a table declares, what the boundary
//! does. Pure; decided once per schema. `docs/write-boundary.md` lists them as a table.

use arrow_schema::{DataType, TimeUnit};
use zerobus_sink_catalog::DeltaType;

use super::{ColumnRefusal, Conversions};

/// What the boundary does with one column on its way to the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The batch already carries the wire type.
    Pass,
    /// Cast to `to`, the wire type of the table's column. `checked`: the cast can fail for a
    /// value (it overflows, or loses digits); a row whose value does not come back unchanged
    /// is a bad row.
    Cast { to: DataType, checked: bool },
    /// Nested values as JSON text (opt-in).
    Json,
    /// A zoned timestamp's UTC wall time, without the zone (opt-in); checked for nanoseconds.
    UtcWall { checked: bool },
}

impl Rule {
    /// The counter kind (`zerobus_type_reconcile_total{kind}`).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Rule::Pass => "pass",
            Rule::Cast { checked: false, .. } => "lossless_cast",
            Rule::Cast { checked: true, .. } => "checked_cast",
            Rule::Json => "nested_to_json",
            Rule::UtcWall { .. } => "zoned_to_utc_wall_time",
        }
    }
}

fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(..)
            | DataType::Map(..)
    )
}

/// Whether every level of `t` is already a type the wire carries (no large or view offsets,
/// no dictionaries), so that a nested column can go as it is.
fn native(t: &DataType) -> bool {
    match t {
        DataType::List(f) => native(f.data_type()),
        DataType::Struct(fields) => fields.iter().all(|f| native(f.data_type())),
        DataType::Map(entries, _) => native(entries.data_type()),
        DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::LargeList(_)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::FixedSizeList(..)
        | DataType::Dictionary(..) => false,
        _ => true,
    }
}

/// Bits of a signed integer that holds every value of integer type `t`.
fn signed_bits(t: &DataType) -> Option<u32> {
    Some(match t {
        DataType::Int8 => 8,
        DataType::Int16 | DataType::UInt8 => 16,
        DataType::Int32 | DataType::UInt16 => 32,
        DataType::Int64 | DataType::UInt32 => 64,
        DataType::UInt64 => 65,
        _ => return None,
    })
}

/// Decimal digits every value of integer type `t` needs.
fn digits(t: &DataType) -> Option<u8> {
    Some(match t {
        DataType::Int8 | DataType::UInt8 => 3,
        DataType::Int16 | DataType::UInt16 => 5,
        DataType::Int32 | DataType::UInt32 => 10,
        DataType::Int64 => 19,
        DataType::UInt64 => 20,
        _ => return None,
    })
}

/// For a type the table's column is not, whether a cast reaches it: `Some(false)` loses
/// nothing, `Some(true)` can fail for a value (checked per row), `None` is no rule.
fn cast_kind(incoming: &DataType, declared: &DeltaType) -> Option<bool> {
    use DataType as A;
    use DeltaType as D;
    let target_bits = match declared {
        D::Byte => Some(8),
        D::Short => Some(16),
        D::Integer => Some(32),
        D::Long => Some(64),
        _ => None,
    };
    if let (Some(target), Some(need)) = (target_bits, signed_bits(incoming)) {
        return Some(need > target);
    }
    match (declared, incoming, signed_bits(incoming), digits(incoming)) {
        // A float holds integers exactly up to 2^24 (FLOAT) and 2^53 (DOUBLE).
        (D::Float, A::Float16, ..) | (D::Double, A::Float16 | A::Float32, ..) => Some(false),
        (D::Float, _, Some(bits), _) => Some(bits > 24),
        (D::Double, _, Some(bits), _) => Some(bits > 53),
        (D::Decimal { precision, scale }, _, _, Some(d)) => {
            Some(d > precision.saturating_sub(*scale))
        }
        (D::Decimal { precision, scale }, A::Decimal128(p, s), ..) => {
            let s = u8::try_from(*s).ok()?;
            Some(!(*scale >= s && precision.saturating_sub(*scale) >= p.saturating_sub(s)))
        }
        (D::Decimal { .. }, A::Decimal256(..), ..) | (D::Date, A::Date64, ..) => Some(true),
        (D::Timestamp, A::Timestamp(unit, Some(_)), ..)
        | (D::TimestampNtz, A::Timestamp(unit, None), ..) => Some(*unit == TimeUnit::Nanosecond),
        _ => None,
    }
}

/// The rule for a column `column` arriving as `incoming` for a table column declared as
/// `declared`; a refusal names the column and both types.
pub(crate) fn rule(
    column: &str,
    incoming: &DataType,
    declared: &DeltaType,
    conversions: Conversions,
) -> Result<Rule, ColumnRefusal> {
    let wire = declared.to_arrow();
    if *incoming == wire {
        return Ok(Rule::Pass);
    }
    let unconvertible = || ColumnRefusal::Unconvertible {
        column: column.to_owned(),
        incoming: incoming.to_string(),
        declared: declared.type_text(),
    };
    let cast = |checked: bool| {
        if arrow_cast::can_cast_types(incoming, &wire) {
            Ok(Rule::Cast {
                to: wire.clone(),
                checked,
            })
        } else {
            Err(unconvertible())
        }
    };
    // The same Delta type in another representation (large or view offsets, a dictionary,
    // another unit or zone label for the same instants): a lossless cast. Nested columns whose
    // every level the wire already carries go as they are (field names may differ).
    if let Ok(mapped) = DeltaType::from_arrow(column, incoming)
        && mapped.loosened() == declared.loosened()
    {
        if is_nested(incoming) && native(incoming) {
            return Ok(Rule::Pass);
        }
        return cast(false);
    }
    match (incoming, declared) {
        (t, DeltaType::String) if is_nested(t) => {
            return if conversions.nested_to_json {
                Ok(Rule::Json)
            } else {
                Err(ColumnRefusal::NestedIntoString {
                    column: column.to_owned(),
                    incoming: incoming.to_string(),
                })
            };
        }
        (DataType::Timestamp(unit, Some(_)), DeltaType::TimestampNtz) => {
            return if conversions.zoned_to_utc_wall_time {
                Ok(Rule::UtcWall {
                    checked: *unit == TimeUnit::Nanosecond,
                })
            } else {
                Err(ColumnRefusal::ZonedIntoNtz {
                    column: column.to_owned(),
                    incoming: incoming.to_string(),
                })
            };
        }
        _ => {}
    }
    match cast_kind(incoming, declared) {
        Some(checked) => cast(checked),
        None => Err(unconvertible()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::Field;

    use super::*;

    fn r(incoming: DataType, declared: DeltaType) -> Result<Rule, ColumnRefusal> {
        rule("c", &incoming, &declared, Conversions::default())
    }

    fn lossless(to: DataType) -> Result<Rule, ColumnRefusal> {
        Ok(Rule::Cast { to, checked: false })
    }

    fn checked(to: DataType) -> Result<Rule, ColumnRefusal> {
        Ok(Rule::Cast { to, checked: true })
    }

    #[test]
    fn each_rule_of_the_table_in_the_docs() {
        use DataType as A;
        use DeltaType as D;
        let utc = || Some("UTC".into());
        let us = TimeUnit::Microsecond;
        let dec = |precision, scale| D::Decimal { precision, scale };
        assert_eq!(r(A::Int64, D::Long), Ok(Rule::Pass));
        assert_eq!(r(A::Int32, D::Long), lossless(A::Int64));
        assert_eq!(r(A::UInt32, D::Long), lossless(A::Int64));
        assert_eq!(r(A::UInt8, D::Short), lossless(A::Int16));
        assert_eq!(r(A::Int64, D::Integer), checked(A::Int32));
        assert_eq!(r(A::UInt64, D::Long), checked(A::Int64));
        assert_eq!(r(A::Float32, D::Double), lossless(A::Float64));
        assert_eq!(r(A::Int32, D::Double), lossless(A::Float64));
        assert_eq!(r(A::Int64, D::Double), checked(A::Float64));
        assert!(r(A::Float64, D::Float).is_err(), "rounds every value");
        assert_eq!(r(A::LargeUtf8, D::String), lossless(A::Utf8));
        assert_eq!(r(A::Utf8View, D::String), lossless(A::Utf8));
        assert_eq!(r(A::LargeBinary, D::Binary), lossless(A::Binary));
        let dict = A::Dictionary(Box::new(A::Int32), Box::new(A::Utf8));
        assert_eq!(r(dict, D::String), lossless(A::Utf8));
        assert_eq!(
            r(A::Timestamp(TimeUnit::Millisecond, utc()), D::Timestamp),
            lossless(A::Timestamp(us, utc()))
        );
        assert_eq!(
            r(A::Timestamp(us, Some("+02:00".into())), D::Timestamp),
            lossless(A::Timestamp(us, utc())),
            "the same instants under another zone label"
        );
        assert_eq!(
            r(A::Timestamp(TimeUnit::Nanosecond, None), D::TimestampNtz),
            checked(A::Timestamp(us, None))
        );
        assert_eq!(r(A::Date64, D::Date), checked(A::Date32));
        assert_eq!(
            r(A::Decimal128(10, 2), dec(12, 3)),
            lossless(A::Decimal128(12, 3))
        );
        assert_eq!(
            r(A::Decimal128(12, 2), dec(10, 2)),
            checked(A::Decimal128(10, 2))
        );
        assert_eq!(r(A::Int32, dec(12, 2)), lossless(A::Decimal128(12, 2)));
        assert_eq!(r(A::Int64, dec(12, 2)), checked(A::Decimal128(12, 2)));
        let refused = r(A::Utf8, D::Long).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "column `c`: no conversion from Utf8 to the table's bigint"
        );
        assert!(r(A::Boolean, D::Integer).is_err());
    }

    #[test]
    fn nested_into_string_and_zoned_into_ntz_are_refused_loudly_unless_asked_for() {
        let nested = DataType::Struct(vec![Field::new("a", DataType::Int64, true)].into());
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        for t in [nested.clone(), list] {
            let refused = r(t.clone(), DeltaType::String).unwrap_err();
            assert!(refused.is_loud(), "{refused}");
            assert!(refused.to_string().contains("nested_to_json"), "{refused}");
            let opt_in = Conversions::default().nested_to_json();
            assert_eq!(rule("c", &t, &DeltaType::String, opt_in), Ok(Rule::Json));
        }
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let refused = r(zoned.clone(), DeltaType::TimestampNtz).unwrap_err();
        assert_eq!(refused.kind(), "refused_zoned_into_ntz");
        assert!(refused.to_string().contains("column `c`"), "{refused}");
        let opt_in = Conversions::default().zoned_to_utc_wall_time();
        assert_eq!(
            rule("c", &zoned, &DeltaType::TimestampNtz, opt_in),
            Ok(Rule::UtcWall { checked: false })
        );
    }

    #[test]
    fn nested_columns_the_wire_carries_pass_as_they_are() {
        let list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
        let declared = DeltaType::from_arrow("c", &list).unwrap();
        assert_eq!(r(list, declared.clone()), Ok(Rule::Pass));
        let large = DataType::LargeList(Arc::new(Field::new("item", DataType::Int64, true)));
        assert!(matches!(
            r(large, declared),
            Ok(Rule::Cast { checked: false, .. })
        ));
    }
}
