//! Provisioning through a catalog: the sink calls the [`TableCatalog`], it never writes DDL.
//!
//! The core asks for each new batch schema of a table to be reconciled
//! ([`Output::Reconcile`](zerobus_sink::Output)); the driver runs [`reconcile`] in a task: the
//! table is created or evolved from the batch's Arrow schema (with the reserved `_twg_*`
//! columns, the contract's comments and properties), the sink registers as a writer (once per
//! table), and the live table is described so that the wire schema follows the table's column
//! order. A refusal (a narrowing, a type conflict) comes back as `Err` with every refusal
//! named; the core hands that schema's batches back. A transient catalog failure is retried
//! here a few times, then left unanswered: the core asks again after its
//! `reconcile_timeout`, so a catalog outage delays a table, it never refuses its schema.
//!
//! Every description is for writing ([`TableCatalog::describe_for_write`]): a table that breaks
//! the service's table requirements (not a managed Delta table, a column name Zerobus cannot
//! write, catalog-managed commits, recreated since the sink first saw it) is refused, named
//! with the requirement, before anything is planned and before any stream of it opens.
//!
//! Before the catalog plans, the live table is described and each existing column the batch
//! brings is matched by the write boundary's rules ([`crate::boundary`]): a column the boundary
//! can convert is presented to the catalog with the table's own type (so an `Int32` batch
//! column for a BIGINT column is no narrowing to refuse), unless the policy allows a lossless
//! widening the catalog can make instead. A column no rule converts is refused here, named,
//! without asking the catalog. The answer is the live table after reconciling; the driver
//! makes the batch schema's [`Plan`](crate::boundary::Plan) from it.
//!
//! A plan that widens a column is not additive: rows acked before it and published after it
//! would land in the service's fallback directory, not the table. So the table is quiesced
//! first ([`Quiescer`]: the driver deals its queued batches and answers once every one has
//! ended), and the alter waits [`Provisioning::publication_wait`] more for the service to
//! publish what was acked (docs/decisions/0010-quiesce-before-a-breaking-change.md).

use std::time::Duration;

use arrow_schema::{Field, Schema, SchemaRef};
use tokio::sync::{mpsc, oneshot};
use zerobus_sink::TableId;
use zerobus_sink_catalog::{
    Access, Action, CatalogError, Contract, DeltaType, DesiredTable, LiveTable, Policy,
    ReconcileOutcome, Role, SinkId, TableCatalog, TableRef, VendedCredentials, Widening,
};

use crate::boundary::{ColumnRefusal, Conversions, rules};

/// How a sink provisions its tables: the catalog (the Unity Catalog backend for Databricks, the
/// local backend for `zerobus-local`), the name it registers as a writer under, and the
/// reconcile policy (widening, human edits to comments, the primary-raw shape).
#[derive(Debug, Clone)]
pub struct Provisioning<C> {
    /// The catalog.
    pub catalog: C,
    /// The writer name recorded on each table.
    pub sink: SinkId,
    /// What reconciling may change.
    pub policy: Policy,
    /// Before a change that is not additive (a widening), how long to wait, once the table's
    /// every batch has ended, for the service to publish its acked rows (default 30 s, the
    /// documented P95 time to table; docs/decisions/0010).
    pub publication_wait: Duration,
}

impl<C: TableCatalog> Provisioning<C> {
    /// Provisions through `catalog`, registering as writer `sink`, with the default policy (no
    /// widening: it upgrades a table's protocol, an owner's decision).
    pub fn new(catalog: C, sink: impl Into<String>) -> Provisioning<C> {
        Provisioning {
            catalog,
            sink: SinkId(sink.into()),
            policy: Policy::default(),
            publication_wait: PUBLICATION_WAIT,
        }
    }

    /// The same, waiting `wait` for publication before a change that is not additive.
    #[must_use]
    pub fn publication_wait(mut self, wait: Duration) -> Provisioning<C> {
        self.publication_wait = wait;
        self
    }

    /// The same, with `policy`.
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Provisioning<C> {
        self.policy = policy;
        self
    }
}

/// The documented P95 time from ack to table (docs.databricks.com zerobus-limits).
pub const PUBLICATION_WAIT: Duration = Duration::from_secs(30);

/// Quiesces a table for a reconcile task: asks the driver to let the table's every admitted
/// batch end, then waits for publication.
#[derive(Debug, Clone)]
pub(crate) struct Quiescer {
    pub(crate) table: TableId,
    pub(crate) tx: mpsc::UnboundedSender<(TableId, oneshot::Sender<()>)>,
    pub(crate) publication_wait: Duration,
}

impl Quiescer {
    /// Returns once the table has nothing pending and `publication_wait` has passed since
    /// (at once if the sink has stopped).
    async fn quiesce(&self, table: &TableRef, why: &str) {
        let (done, ended) = oneshot::channel();
        tracing::info!(%table, change = why, "quiescing the table before a change that is not additive");
        if self.tx.send((self.table, done)).is_err() || ended.await.is_err() {
            return;
        }
        tracing::info!(
            %table,
            wait = ?self.publication_wait,
            "every batch of the table ended; waiting for its acked rows to be published"
        );
        tokio::time::sleep(self.publication_wait).await;
    }
}

/// The first change in `desired` that is not additive (a widening), in words.
fn not_additive(
    before: Option<&LiveTable>,
    desired: &DesiredTable,
    policy: &Policy,
) -> Option<String> {
    zerobus_sink_catalog::plan(before, desired, policy)
        .actions
        .into_iter()
        .find_map(|a| match a {
            Action::WidenColumn { column, from, to } => Some(format!(
                "widen {column} from {} to {}",
                from.type_text(),
                to.type_text()
            )),
            _ => None,
        })
}

/// The catalog of a sink that provisions nothing (tables taken as they are): it has no value,
/// so none of its methods can ever run.
#[derive(Debug, Clone, Copy)]
pub enum NoCatalog {}

impl TableCatalog for NoCatalog {
    async fn describe(&self, _: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        match *self {}
    }

    async fn describe_for_write(&self, _: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        match *self {}
    }

    async fn reconcile(
        &self,
        _: &DesiredTable,
        _: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        match *self {}
    }

    async fn register_sink(&self, _: &TableRef, _: &SinkId) -> Result<(), CatalogError> {
        match *self {}
    }

    async fn vend_credentials(
        &self,
        _: &TableRef,
        _: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        match *self {}
    }
}

/// What a reconcile is for: a table, the batch schema, and what the table definition adds.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) table: String,
    pub(crate) schema: SchemaRef,
    pub(crate) contract: Option<Contract>,
    pub(crate) role: Role,
    /// What the write boundary may convert.
    pub(crate) conversions: Conversions,
    /// Register the sink as a writer (the table's first reconcile).
    pub(crate) register: bool,
}

/// A reconcile's answer: the live table and the statements (or commits) executed, or every
/// refusal; `None` when the catalog could not be reached (ask again later).
pub(crate) type Answer = Option<Result<(LiveTable, Vec<String>), Vec<ColumnRefusal>>>;

fn catalog_refusal(reason: impl ToString) -> Vec<ColumnRefusal> {
    vec![ColumnRefusal::Catalog {
        reason: reason.to_string(),
    }]
}

/// The schema to present to the catalog for `batch`, given the table as it is: each existing
/// column the boundary converts takes the table's type and nullability (the boundary casts and
/// checks each batch), unless `policy` allows a lossless widening the catalog makes instead.
/// Columns no rule converts are refused, every one named.
pub(crate) fn presented(
    batch: &Schema,
    live: Option<&LiveTable>,
    policy: &Policy,
    conversions: Conversions,
) -> Result<Schema, Vec<ColumnRefusal>> {
    let Some(live) = live else {
        return Ok(batch.clone());
    };
    let mut refusals = Vec::new();
    let mut fields = Vec::with_capacity(batch.fields().len());
    for field in batch.fields() {
        let Some(column) = live.column(field.name()) else {
            fields.push(field.as_ref().clone());
            continue;
        };
        let widens = DeltaType::from_arrow(field.name(), field.data_type()).is_ok_and(|wanted| {
            column.data_type.loosened().can_widen_to(&wanted.loosened()) == Widening::Lossless
        });
        if policy.allow_widening && widens {
            fields.push(field.as_ref().clone());
            continue;
        }
        match rules::rule(
            field.name(),
            field.data_type(),
            &column.data_type,
            conversions,
        ) {
            Ok(_) => fields.push(
                Field::new(field.name(), column.data_type.to_arrow(), column.nullable)
                    .with_metadata(field.metadata().clone()),
            ),
            Err(refusal) => refusals.push(refusal),
        }
    }
    if refusals.is_empty() {
        Ok(Schema::new_with_metadata(fields, batch.metadata().clone()))
    } else {
        Err(refusals)
    }
}

/// Makes the table take `request.schema`; see the module docs. Returns the live column order
/// and the statements (or commits) executed.
pub(crate) async fn reconcile<C: TableCatalog>(
    catalog: &C,
    sink: &SinkId,
    policy: &Policy,
    request: &Request,
    quiescer: &Quiescer,
) -> Answer {
    let table = match TableRef::parse(&request.table) {
        Ok(t) => t,
        Err(e) => return Some(Err(catalog_refusal(e))),
    };
    let mut delay = Duration::from_millis(500);
    let mut quiesced = false;
    for attempt in 1..=4 {
        let outcome = async {
            let before = catalog.describe_for_write(&table).await?;
            let schema = match presented(
                &request.schema,
                before.as_ref(),
                policy,
                request.conversions,
            ) {
                Ok(schema) => schema,
                Err(refusals) => return Ok(Err(refusals)),
            };
            let desired = match DesiredTable::from_arrow(
                table.clone(),
                &schema,
                request.contract.as_ref(),
                request.role,
            ) {
                Ok(d) => d,
                Err(e) => return Ok(Err(catalog_refusal(e))),
            };
            if !quiesced && let Some(why) = not_additive(before.as_ref(), &desired, policy) {
                quiescer.quiesce(&table, &why).await;
                quiesced = true;
            }
            let outcome = catalog.reconcile(&desired, policy).await?;
            if request.register {
                catalog.register_sink(&table, sink).await?;
            }
            let live = catalog.describe_for_write(&table).await?;
            Ok::<_, CatalogError>(Ok((outcome, live)))
        }
        .await;
        match outcome {
            Ok(Err(refusals)) => return Some(Err(refusals)),
            Ok(Ok((outcome, Some(live)))) => return Some(Ok((live, outcome.executed))),
            Ok(Ok((_, None))) => {
                return Some(Err(catalog_refusal(format!(
                    "{table}: the catalog reconciled it but then describes it as absent"
                ))));
            }
            Err(e) if e.is_retryable() || e.is_conflict() => {
                tracing::warn!(%table, attempt, error = %e, "reconcile failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Some(Err(catalog_refusal(e))),
        }
    }
    tracing::warn!(%table, "the catalog is unreachable; the sink will ask again");
    None
}

#[cfg(test)]
mod tests {
    use arrow_schema::DataType;

    use super::*;
    use crate::boundary::plan::live_of;

    #[test]
    fn convertible_columns_are_presented_with_the_tables_type_unless_the_catalog_may_widen() {
        let table = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::Int32, true),
        ]);
        let live = live_of("main.bronze.t", &table);
        let batch = Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("n", DataType::Int64, true),
            Field::new("new", DataType::Utf8, true),
        ]);
        let none = Conversions::default();
        let keep = presented(&batch, Some(&live), &Policy::default(), none).unwrap();
        assert_eq!(keep, table_then_new(&table));
        let widen = Policy {
            allow_widening: true,
            ..Policy::default()
        };
        let widened = presented(&batch, Some(&live), &widen, none).unwrap();
        assert_eq!(
            widened.field(1).data_type(),
            &DataType::Int64,
            "the catalog widens"
        );
        assert_eq!(presented(&batch, None, &widen, none).unwrap(), batch);
        let text = Schema::new(vec![Field::new("id", DataType::Utf8, false)]);
        let refused = presented(&text, Some(&live), &Policy::default(), none).unwrap_err();
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].to_string().contains("column `id`"),
            "{}",
            refused[0]
        );
    }

    fn table_then_new(table: &Schema) -> Schema {
        let mut fields: Vec<Field> = table.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("new", DataType::Utf8, true));
        Schema::new(fields)
    }
}
