//! The DML the stub executes: `INSERT … VALUES` appends rows, each value checked against its
//! column's type and nullability; `SELECT` of columns (or `*`) from one table with an optional
//! conjunction of `column = literal`, answered as `JSON_ARRAY` renders values. Anything else is
//! refused by name, so a statement the stub cannot judge never passes silently.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArguments, Insert, Query, SelectItem, SetExpr, TableFactor,
    TableObject, UnaryOperator, Value as SqlValue,
};

use super::{Inner, ResultSet, object_name};

fn not_found(name: &str) -> String {
    format!("TABLE_OR_VIEW_NOT_FOUND: {name}")
}

pub(super) fn insert(inner: &mut Inner, insert: &Insert) -> Result<(), String> {
    let TableObject::TableName(name) = &insert.table else {
        return Err("unsupported INSERT target".into());
    };
    if insert.overwrite || insert.by_name || insert.on.is_some() || !insert.assignments.is_empty() {
        return Err(format!("unsupported INSERT form: {insert}"));
    }
    let name = object_name(name);
    let table = inner
        .tables
        .get_mut(&name)
        .ok_or_else(|| not_found(&name))?;
    // The target columns, by position in the table.
    let targets: Vec<usize> = if insert.columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        insert
            .columns
            .iter()
            .map(|c| {
                let c = object_name(c);
                table
                    .columns
                    .iter()
                    .position(|x| x.name.eq_ignore_ascii_case(&c))
                    .ok_or_else(|| format!("UNRESOLVED_COLUMN: {c} is not a column of {name}"))
            })
            .collect::<Result<_, _>>()?
    };
    let Some(query) = &insert.source else {
        return Err("INSERT without VALUES".into());
    };
    let SetExpr::Values(values) = query.body.as_ref() else {
        return Err(format!("unsupported INSERT source: {query}"));
    };
    let mut rows = Vec::with_capacity(values.rows.len());
    for row in &values.rows {
        let exprs = &row.content;
        if exprs.len() != targets.len() {
            return Err(format!(
                "INSERT_COLUMN_ARITY_MISMATCH: {} values for {} columns",
                exprs.len(),
                targets.len()
            ));
        }
        let mut out = vec![Value::Null; table.columns.len()];
        for (expr, &i) in exprs.iter().zip(&targets) {
            out[i] = value(expr, &table.columns[i].data_type)
                .map_err(|e| format!("{} of {name}: {e}", table.columns[i].name))?;
        }
        for (c, v) in table.columns.iter().zip(&out) {
            if v.is_null() && !c.nullable {
                return Err(format!(
                    "DELTA_NOT_NULL_CONSTRAINT_VIOLATED: NOT NULL column {} of {name} has no value",
                    c.name
                ));
            }
        }
        rows.push(out);
    }
    // All rows, or none: one commit.
    table.rows.extend(rows);
    Ok(())
}

/// A literal for a column of Spark JSON type `t`: what the table stores.
fn value(expr: &Expr, t: &Value) -> Result<Value, String> {
    let t = t.as_str().unwrap_or("complex");
    if let Expr::Value(v) = expr
        && v.value == SqlValue::Null
    {
        return Ok(Value::Null);
    }
    let range = match t {
        "byte" => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
        "short" => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
        "integer" => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        "long" => Some((i64::MIN, i64::MAX)),
        _ => None,
    };
    match (t, expr) {
        ("string", Expr::Value(v)) => match &v.value {
            SqlValue::SingleQuotedString(s) => Ok(json!(s)),
            other => Err(format!(
                "DATATYPE_MISMATCH: {other} is not a STRING literal"
            )),
        },
        ("timestamp", Expr::Function(f))
            if object_name(&f.name).eq_ignore_ascii_case("current_timestamp")
                && match &f.args {
                    FunctionArguments::None => true,
                    FunctionArguments::List(l) => l.args.is_empty(),
                    FunctionArguments::Subquery(_) => false,
                } =>
        {
            Ok(json!(now()))
        }
        (_, _) if range.is_some() => {
            let (min, max) = range.unwrap_or_default();
            let n = integer(expr)?;
            if n < min || n > max {
                return Err(format!("CAST_OVERFLOW: {n} does not fit {t}"));
            }
            Ok(json!(n))
        }
        _ => Err(format!(
            "DATATYPE_MISMATCH: {expr} for a column of type {t}"
        )),
    }
}

fn integer(expr: &Expr) -> Result<i64, String> {
    match expr {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(n, _) => n
                .parse()
                .map_err(|_| format!("CAST_OVERFLOW: {n} is not a BIGINT")),
            other => Err(format!(
                "DATATYPE_MISMATCH: {other} is not an integer literal"
            )),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => integer(expr)?
            .checked_neg()
            .ok_or_else(|| "CAST_OVERFLOW".to_owned()),
        other => Err(format!(
            "DATATYPE_MISMATCH: {other} is not an integer literal"
        )),
    }
}

/// Now, as `JSON_ARRAY` renders a timestamp (`2026-01-02T03:04:05.678Z`).
fn now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        d.subsec_millis()
    )
}

pub(super) fn select(inner: &Inner, query: &Query) -> Result<ResultSet, String> {
    if query.with.is_some()
        || query.order_by.is_some()
        || query.limit_clause.is_some()
        || query.fetch.is_some()
    {
        return Err(format!("unsupported query: {query}"));
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(format!("unsupported query: {query}"));
    };
    let [from] = select.from.as_slice() else {
        return Err("SELECT from exactly one table only".into());
    };
    let TableFactor::Table { name, .. } = &from.relation else {
        return Err(format!("unsupported FROM: {}", from.relation));
    };
    if !from.joins.is_empty() || select.distinct.is_some() || select.having.is_some() {
        return Err(format!("unsupported SELECT: {select}"));
    }
    let name = object_name(name);
    let table = inner.tables.get(&name).ok_or_else(|| not_found(&name))?;
    let find = |ident: &str| {
        table
            .columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(ident))
            .ok_or_else(|| format!("UNRESOLVED_COLUMN: {ident} is not a column of {name}"))
    };
    let mut picked = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) => picked.extend(0..table.columns.len()),
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => picked.push(find(&i.value)?),
            other => return Err(format!("unsupported select item {other}")),
        }
    }
    let mut rows = Vec::new();
    for row in &table.rows {
        if let Some(filter) = &select.selection
            && !matches(filter, row, &find)?
        {
            continue;
        }
        rows.push(picked.iter().map(|&i| rendered(&row[i])).collect());
    }
    Ok(ResultSet {
        columns: picked
            .iter()
            .map(|&i| {
                (
                    table.columns[i].name.clone(),
                    table.columns[i].data_type.clone(),
                )
            })
            .collect(),
        rows,
    })
}

/// A value as `JSON_ARRAY` renders it: a string, or null.
fn rendered(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Whether `row` satisfies `filter`: `column = literal`, joined by `AND`, in parentheses or not.
fn matches(
    filter: &Expr,
    row: &[Value],
    find: &impl Fn(&str) -> Result<usize, String>,
) -> Result<bool, String> {
    match filter {
        Expr::Nested(e) => matches(e, row, find),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => Ok(matches(left, row, find)? && matches(right, row, find)?),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let Expr::Identifier(column) = left.as_ref() else {
                return Err(format!("unsupported predicate {filter}"));
            };
            let literal = match right.as_ref() {
                Expr::Value(v) => match &v.value {
                    SqlValue::SingleQuotedString(s) => s.clone(),
                    SqlValue::Number(n, _) => n.clone(),
                    other => return Err(format!("unsupported literal {other}")),
                },
                other => return Err(format!("unsupported predicate operand {other}")),
            };
            Ok(rendered(&row[find(&column.value)?]).as_deref() == Some(literal.as_str()))
        }
        other => Err(format!("unsupported predicate {other}")),
    }
}
