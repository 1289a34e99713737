//! Arrow out to Python without a copy: a batch handed back (not durable, or refused) as an
//! object with `__arrow_c_array__`, which `pyarrow.record_batch(obj)` and polars take.

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::arrow_in::arrow_error;

/// Rows handed back by the sink, in Arrow: pass it to `pyarrow.record_batch(...)` (or any
/// consumer of the Arrow PyCapsule interface) to get the rows.
#[pyclass(module = "zerobus_sink._native", name = "Rows", frozen)]
pub(crate) struct Rows {
    batch: RecordBatch,
}

impl Rows {
    pub(crate) fn new(batch: RecordBatch) -> Rows {
        Rows { batch }
    }
}

#[pymethods]
impl Rows {
    /// The number of rows.
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// The Arrow PyCapsule interface: `(schema capsule, array capsule)` of a struct array.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema; // the rows are given in their own schema
        let array = StructArray::from(self.batch.clone());
        let schema = FFI_ArrowSchema::try_from(array.data_type()).map_err(arrow_error)?;
        let data = FFI_ArrowArray::new(&array.to_data());
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let data = PyCapsule::new_with_value(py, data, c"arrow_array")?;
        PyTuple::new(py, [schema.into_any(), data.into_any()])
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "Rows({} rows: {})",
            self.batch.num_rows(),
            self.batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
