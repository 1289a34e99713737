//! The barrier: [`ZerobusCountExec`] sums the writer's per-partition counts into the one-row
//! `count` an `INSERT` returns. It runs after every partition's rows are durable (each
//! partition yields its count only then), so the count is never ahead of the table.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::UInt64Array;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{Distribution, EquivalenceProperties};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PhysicalExpr, PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;

use crate::write::{COUNT, count_batch, count_schema};

/// Sums the `count` column of its single input partition (the writer's partitions, merged)
/// into one row.
#[derive(Debug)]
pub struct ZerobusCountExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl ZerobusCountExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> ZerobusCountExec {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        ZerobusCountExec {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for ZerobusCountExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ZerobusCountExec")
    }
}

impl ExecutionPlan for ZerobusCountExec {
    fn name(&self) -> &str {
        "ZerobusCountExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
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
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(ZerobusCountExec::new(input))),
            _ => Err(DataFusionError::Internal(
                "ZerobusCountExec has exactly one input".into(),
            )),
        }
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
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ZerobusCountExec has one partition, not {partition}"
            )));
        }
        let mut counts = self.input.execute(0, context)?;
        let once = futures::stream::once(async move {
            let mut total = 0u64;
            while let Some(batch) = counts.next().await {
                let batch = batch?;
                let column = batch
                    .column_by_name(COUNT)
                    .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                    .ok_or_else(|| {
                        DataFusionError::Internal("the writer's output has no count".into())
                    })?;
                total += column.values().iter().sum::<u64>();
            }
            count_batch(total)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            once,
        )))
    }
}
