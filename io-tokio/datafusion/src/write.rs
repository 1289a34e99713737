//! The writer: [`ZerobusWriteExec`] writes every input partition through the target's shared
//! sink, in parallel, and yields each partition's row count once every one of its rows is
//! durable.
//!
//! It asks for no particular input distribution (the single-partition trap of DataFusion's
//! `DataSinkExec`, ENGINES.md): the partitions DataFusion plans are the partitions that write,
//! so more partitions (or, later, more executors) write more in parallel. It does not ask for
//! more partitions either (`benefits_from_input_partitioning` is false): a round-robin
//! repartition would deal rows to partitions by timing, and a rerun would then give the same
//! row another position.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PhysicalExpr, PlanProperties, ReplaceChildrenOptions,
};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use zerobus_sink::{CoverageRange, Token};
use zerobus_sink_tokio::TableDef;

use crate::error::WriteError;
use crate::shared::SharedSink;
use crate::target::Target;

/// The column of the row counts the writer yields (one row per input partition) and the
/// `INSERT` returns (one row).
pub const COUNT: &str = "count";

/// The schema of a row count: one non-null `count` column of `UInt64`, as DataFusion's
/// `INSERT` returns.
#[must_use]
pub fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        COUNT,
        DataType::UInt64,
        false,
    )]))
}

/// A one-row batch of [`count_schema`].
pub(crate) fn count_batch(rows: u64) -> Result<RecordBatch> {
    let column: ArrayRef = Arc::new(UInt64Array::from(vec![rows]));
    Ok(RecordBatch::try_new(count_schema(), vec![column])?)
}

/// Writes each input partition through the target's shared sink; its output partition `i` is
/// one row, the number of rows of input partition `i`, yielded only once all of them are
/// durable. Each batch's rows are stamped with their position: `_twg_source_topic` = the job,
/// `_twg_source_partition` = the input partition, `_twg_source_start + _twg_source_row` = the
/// row's offset in the partition (`_twg_source_end` is one past the batch's last offset).
#[derive(Debug)]
pub struct ZerobusWriteExec {
    input: Arc<dyn ExecutionPlan>,
    target: Arc<Target>,
    def: TableDef,
    sink: Arc<SharedSink>,
    job: Arc<str>,
    metrics: ExecutionPlanMetricsSet,
    properties: Arc<PlanProperties>,
}

impl ZerobusWriteExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        target: Arc<Target>,
        def: TableDef,
        sink: Arc<SharedSink>,
        job: Arc<str>,
    ) -> ZerobusWriteExec {
        let partitions = input.output_partitioning().partition_count();
        let properties = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        ZerobusWriteExec {
            input,
            target,
            def,
            sink,
            job,
            metrics: ExecutionPlanMetricsSet::new(),
            properties: Arc::new(properties),
        }
    }

    /// The target table.
    #[must_use]
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The job id stamped on this `INSERT`'s rows (`_twg_source_topic`).
    #[must_use]
    pub fn job(&self) -> &str {
        &self.job
    }
}

impl DisplayAs for ZerobusWriteExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ZerobusWriteExec: table={}, job={}, streams={}",
            self.target.table(),
            self.job,
            self.target.stream_count()
        )
    }
}

impl ExecutionPlan for ZerobusWriteExec {
    fn name(&self) -> &str {
        "ZerobusWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(input) = children.pop().filter(|_| children.is_empty()) else {
            return Err(DataFusionError::Internal(
                "ZerobusWriteExec has exactly one input".into(),
            ));
        };
        Ok(Arc::new(ZerobusWriteExec::new(
            input,
            self.target.clone(),
            self.def.clone(),
            self.sink.clone(),
            self.job.clone(),
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let writer = Partition {
            target: self.target.clone(),
            def: self.def.clone(),
            sink: self.sink.clone(),
            job: self.job.clone(),
            partition,
            written: MetricBuilder::new(&self.metrics).counter("rows_durable", partition),
        };
        let once = futures::stream::once(async move {
            let rows = writer.write(input).await?;
            count_batch(rows)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            once,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// One input partition's writer.
struct Partition {
    target: Arc<Target>,
    def: TableDef,
    sink: Arc<SharedSink>,
    job: Arc<str>,
    partition: usize,
    written: datafusion::physical_plan::metrics::Count,
}

impl Partition {
    /// Sends every batch of `input` with its position, then awaits every receipt; the rows,
    /// once all are durable. Fails at the first batch refused or handed back, naming it.
    async fn write(self, mut input: SendableRecordBatchStream) -> Result<u64> {
        let table = self.target.table().full_name();
        let Ok(number) = u32::try_from(self.partition) else {
            return Err(WriteError::Partition {
                table,
                partition: self.partition,
            }
            .into());
        };
        let mut offset: i64 = 0;
        let mut pending = FuturesUnordered::new();
        while let Some(batch) = input.next().await {
            let batch = batch?;
            let rows = i64::try_from(batch.num_rows()).unwrap_or(i64::MAX);
            if rows == 0 {
                continue;
            }
            let (start, end) = (offset, offset.saturating_add(rows));
            offset = end;
            let sink = self
                .sink
                .get(&self.target, &self.def)
                .await
                .map_err(|source| WriteError::Start {
                    table: table.clone(),
                    partition: self.partition,
                    source,
                })?;
            let token = Token::derived(CoverageRange::new(&*self.job, number, start, end));
            let receipt = sink
                .send(batch, token)
                .await
                .map_err(|e| self.refused(start, end, e.to_string()))?;
            pending.push(receipt.map(move |r| (start, end, r)));
            // A batch handed back fails the partition now, not after the rest is sent.
            while let Some(Some((start, end, r))) = pending.next().now_or_never() {
                self.settled(start, end, r)?;
            }
        }
        while let Some((start, end, r)) = pending.next().await {
            self.settled(start, end, r)?;
        }
        if let Some(sink) = self.sink.started() {
            let isolated = sink.isolated(&self.job, number);
            if isolated > 0 {
                return Err(self
                    .refused(0, offset, format!("{isolated} rows isolated as bad rows"))
                    .into());
            }
        }
        tracing::debug!(%table, job = %self.job, partition = self.partition, rows = offset, "input partition durable");
        Ok(u64::try_from(offset).unwrap_or(0))
    }

    fn settled(
        &self,
        start: i64,
        end: i64,
        receipt: Result<zerobus_sink_tokio::Delivered, zerobus_sink_tokio::DeliveryError>,
    ) -> Result<()> {
        match receipt {
            Ok(delivered) => {
                self.written
                    .add(usize::try_from(delivered.rows).unwrap_or(usize::MAX));
                Ok(())
            }
            Err(source) => Err(WriteError::NotDurable {
                table: self.target.table().full_name(),
                job: self.job.to_string(),
                partition: self.partition,
                start,
                end,
                source,
            }
            .into()),
        }
    }

    fn refused(&self, start: i64, end: i64, reason: String) -> WriteError {
        WriteError::Refused {
            table: self.target.table().full_name(),
            job: self.job.to_string(),
            partition: self.partition,
            start,
            end,
            reason,
        }
    }
}
