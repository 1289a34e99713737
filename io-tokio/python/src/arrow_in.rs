//! Arrow in from Python without a copy: the Arrow PyCapsule interface (`__arrow_c_array__`,
//! `__arrow_c_stream__`, `__arrow_c_schema__`), which pyarrow >= 14, polars and others export.
//! The capsules hold the C data interface's structs; taking them moves the producer's buffers
//! into Rust arrays, which release them through the producer's own `release` callback.

use std::ffi::CStr;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi};
use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};

use crate::errors;

const STREAM: &CStr = c"arrow_array_stream";
const ARRAY: &CStr = c"arrow_array";
const SCHEMA: &CStr = c"arrow_schema";

/// Batches read from a Python object.
pub(crate) enum Input {
    /// One batch (`__arrow_c_array__`: a pyarrow `RecordBatch`, a struct array).
    One(RecordBatch),
    /// A stream of batches (`__arrow_c_stream__`: a pyarrow `Table` or `RecordBatchReader`, a
    /// polars `DataFrame`), read as it is sent.
    Stream(ArrowArrayStreamReader),
}

/// What `obj` exports, taken: a single batch where it offers one, else its stream.
pub(crate) fn input(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    if obj.hasattr("__arrow_c_array__")? {
        return one(obj).map(Input::One);
    }
    if obj.hasattr("__arrow_c_stream__")? {
        return stream(obj).map(Input::Stream);
    }
    Err(errors::input(format!(
        "expected Arrow data (an object with __arrow_c_array__ or __arrow_c_stream__, such as a \
         pyarrow RecordBatch, Table or RecordBatchReader, or a polars DataFrame), got {}",
        type_name(obj)
    )))
}

#[allow(unsafe_code)]
fn one(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let pair = obj.call_method0("__arrow_c_array__")?;
    let pair = pair.cast::<PyTuple>().map_err(|_| {
        errors::input("__arrow_c_array__ did not return a (schema, array) tuple".into())
    })?;
    if pair.len() != 2 {
        return Err(errors::input(
            "__arrow_c_array__ did not return a (schema, array) tuple".into(),
        ));
    }
    let schema_capsule = capsule(&pair.get_item(0)?, SCHEMA)?;
    let array_capsule = capsule(&pair.get_item(1)?, ARRAY)?;
    let schema_ptr = schema_capsule
        .pointer_checked(Some(SCHEMA))?
        .cast::<FFI_ArrowSchema>();
    let array_ptr = array_capsule
        .pointer_checked(Some(ARRAY))?
        .cast::<FFI_ArrowArray>();
    // SAFETY: the capsules are named as the PyCapsule interface specifies, so they hold an
    // ArrowSchema and an ArrowArray. The array is moved out (its `release` left null in the
    // capsule, so the capsule's destructor does nothing); the schema is only borrowed while the
    // capsule is alive.
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array_ptr.as_ptr());
        from_ffi(array, schema_ptr.as_ref())
    }
    .map_err(arrow_error)?;
    let array = arrow_array::make_array(data);
    let Some(columns) = array.as_any().downcast_ref::<StructArray>() else {
        return Err(errors::input(format!(
            "expected a record batch or a struct array, got an array of {}",
            array.data_type()
        )));
    };
    if columns.null_count() > 0 {
        return Err(errors::input(
            "the struct array has null rows: a record batch has none".into(),
        ));
    }
    Ok(RecordBatch::from(columns))
}

#[allow(unsafe_code)]
fn stream(obj: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    let capsule_obj = obj.call_method0("__arrow_c_stream__")?;
    let capsule = capsule(&capsule_obj, STREAM)?;
    let ptr = capsule
        .pointer_checked(Some(STREAM))?
        .cast::<FFI_ArrowArrayStream>();
    // SAFETY: a capsule named "arrow_array_stream" holds an ArrowArrayStream; `from_raw` moves
    // it out and leaves a released (empty) one behind for the capsule's destructor.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr.as_ptr()) };
    ArrowArrayStreamReader::try_new(stream).map_err(arrow_error)
}

/// A schema from an object with `__arrow_c_schema__` (a pyarrow `Schema`, a polars schema).
#[allow(unsafe_code)]
pub(crate) fn schema(obj: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    if !obj.hasattr("__arrow_c_schema__")? {
        return Err(errors::input(format!(
            "expected an Arrow schema (an object with __arrow_c_schema__, such as a pyarrow \
             Schema), got {}",
            type_name(obj)
        )));
    }
    let capsule_obj = obj.call_method0("__arrow_c_schema__")?;
    let capsule = capsule(&capsule_obj, SCHEMA)?;
    let ptr = capsule
        .pointer_checked(Some(SCHEMA))?
        .cast::<FFI_ArrowSchema>();
    // SAFETY: a capsule named "arrow_schema" holds an ArrowSchema, borrowed while it lives.
    let schema = Schema::try_from(unsafe { ptr.as_ref() }).map_err(arrow_error)?;
    Ok(std::sync::Arc::new(schema))
}

fn capsule<'py>(obj: &Bound<'py, PyAny>, name: &CStr) -> PyResult<Bound<'py, PyCapsule>> {
    obj.cast::<PyCapsule>().cloned().map_err(|_| {
        errors::input(format!(
            "expected a PyCapsule named {:?}, got {}",
            name,
            type_name(obj)
        ))
    })
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .fully_qualified_name()
        .map_or_else(|_| "an unknown type".to_owned(), |n| n.to_string())
}

pub(crate) fn arrow_error(e: ArrowError) -> PyErr {
    errors::input(format!("the Arrow data could not be read: {e}"))
}
