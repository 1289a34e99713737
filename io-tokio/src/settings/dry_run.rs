//! What the catalog would do for each table of a file, planned and not executed (the
//! operator's `zerobus-sinkctl check`): the same presentation of types and the same pure plan the
//! sink uses when a table's first batch arrives.

use arrow_schema::SchemaRef;
use zerobus_sink_catalog::{AnyCatalog, DesiredTable, ReconcilePlan, Role, TableCatalog, TableRef};

use super::{SinkFile, build, file};
use crate::provision::presented;

/// One table's dry run.
#[derive(Debug)]
#[non_exhaustive]
pub struct TablePlan {
    /// The table.
    pub table: String,
    /// The plan (its actions, possibly none, and its refusals), or why none could be made
    /// (no schema, the catalog unreachable, a table Zerobus cannot write, a column no rule
    /// converts).
    pub outcome: Result<ReconcilePlan, String>,
}

impl SinkFile {
    /// Describes each table through `catalog` and plans what reconciling it with its schema
    /// (from the file's `columns` or `schemas`) would change, executing nothing.
    pub async fn dry_run(
        &self,
        catalog: &AnyCatalog,
        schemas: impl Fn(&str) -> Option<SchemaRef>,
    ) -> Vec<TablePlan> {
        let policy = build::policy(&self.file, catalog.primary_raw_shape());
        let mut plans = Vec::new();
        for (i, t) in self.file.tables.iter().enumerate() {
            let outcome = async {
                let schema = build::schema_for(i, t, &schemas).map_err(|e| e.to_string())?;
                let table = TableRef::parse(&t.name).map_err(|e| e.to_string())?;
                let live = catalog
                    .describe_for_write(&table)
                    .await
                    .map_err(|e| e.to_string())?;
                let conversions = build::conversions(t);
                let shown = presented(&schema, live.as_ref(), &policy, conversions)
                    .map_err(|refusals| crate::boundary::joined(&refusals, usize::MAX))?;
                let role = match t.role {
                    file::RoleName::Standard => Role::Standard,
                    file::RoleName::PrimaryRaw => Role::PrimaryRaw,
                };
                let desired = DesiredTable::from_arrow(table, &shown, None, role)
                    .map_err(|e| e.to_string())?;
                Ok(zerobus_sink_catalog::plan(live.as_ref(), &desired, &policy))
            }
            .await;
            plans.push(TablePlan {
                table: t.name.clone(),
                outcome,
            });
        }
        plans
    }
}
