//! `catalog.schema.table` names, validated as the service requires.

use std::fmt;

use crate::error::CatalogError;

/// A Unity Catalog table name: three non-empty parts of ASCII letters, digits and underscores
/// (the Zerobus limits page allows no other characters in table names).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    catalog: String,
    schema: String,
    table: String,
}

/// Whether `name` is a valid identifier for the service: non-empty ASCII letters, digits and
/// underscores.
#[must_use]
pub fn is_identifier_safe(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl TableRef {
    /// Parses `catalog.schema.table`; the error names the offending part.
    pub fn parse(full_name: &str) -> Result<TableRef, CatalogError> {
        let parts: Vec<&str> = full_name.split('.').collect();
        let [catalog, schema, table] = parts.as_slice() else {
            return Err(CatalogError::InvalidName {
                name: full_name.to_owned(),
                reason: format!(
                    "expected catalog.schema.table, found {} part(s)",
                    parts.len()
                ),
            });
        };
        TableRef::new(catalog, schema, table)
    }

    /// A table from its three parts.
    pub fn new(catalog: &str, schema: &str, table: &str) -> Result<TableRef, CatalogError> {
        for (what, part) in [("catalog", catalog), ("schema", schema), ("table", table)] {
            if !is_identifier_safe(part) {
                return Err(CatalogError::InvalidName {
                    name: format!("{catalog}.{schema}.{table}"),
                    reason: format!(
                        "{what} name {part:?} must be non-empty ASCII letters, digits or underscores"
                    ),
                });
            }
        }
        Ok(TableRef {
            catalog: catalog.to_owned(),
            schema: schema.to_owned(),
            table: table.to_owned(),
        })
    }

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &str {
        &self.catalog
    }

    /// The schema.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The table.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.table
    }

    /// `catalog.schema.table`.
    #[must_use]
    pub fn full_name(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.catalog, self.schema, self.table)
    }
}

/// A backquoted identifier, backquotes doubled (names sit at the bottom of the crate's layers,
/// so the type map and the DDL renderer both quote with this).
#[must_use]
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_and_errors_name_the_part() {
        let t = TableRef::parse("main.bronze.orders_2").unwrap();
        assert_eq!(
            (t.catalog(), t.schema(), t.table()),
            ("main", "bronze", "orders_2")
        );
        assert_eq!(t.to_string(), "main.bronze.orders_2");
        let err = TableRef::parse("main.bronze").unwrap_err().to_string();
        assert!(err.contains("found 2 part(s)"), "{err}");
        let err = TableRef::parse("main.br-onze.t").unwrap_err().to_string();
        assert!(err.contains("schema name \"br-onze\""), "{err}");
        assert!(TableRef::parse("main..t").is_err());
        assert!(TableRef::parse("a.b.t`; DROP").is_err());
        assert!(!is_identifier_safe("é"));
    }
}
