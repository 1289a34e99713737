//! Rust errors as the Python exceptions of `zerobus_sink.errors`, each carrying the table, the
//! column, a code and whether retrying can help. The classes are defined in Python (typed,
//! documented there); they are built here by name. No message carries a secret: the Rust
//! errors never hold one (`io-tokio/tests/secret_sweep.rs`).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use zerobus_sink::Raw;
use zerobus_sink_tokio::settings::ConfigFileError;
use zerobus_sink_tokio::{ColumnRefusal, FlushError, SendError};

/// The fields every exception of the hierarchy carries.
#[derive(Default)]
pub(crate) struct Detail {
    pub table: Option<String>,
    pub column: Option<String>,
    pub code: &'static str,
    pub retryable: bool,
}

/// Builds `zerobus_sink.errors.<class>(message, table=, column=, code=, retryable=, **extra)`.
pub(crate) fn build(
    class: &'static str,
    message: String,
    detail: Detail,
    extra: impl FnOnce(Python<'_>, &Bound<'_, PyDict>) -> PyResult<()>,
) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let cls = py.import("zerobus_sink.errors")?.getattr(class)?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("table", detail.table)?;
            kwargs.set_item("column", detail.column)?;
            kwargs.set_item("code", detail.code)?;
            kwargs.set_item("retryable", detail.retryable)?;
            extra(py, &kwargs)?;
            let exc = cls.call((message.clone(),), Some(&kwargs))?;
            Ok(PyErr::from_value(exc))
        })();
        // The module is part of the package: failing to build the exception is a packaging
        // bug, reported as a RuntimeError that still carries the message.
        made.unwrap_or_else(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!("{message} (and {e})"))
        })
    })
}

fn plain(class: &'static str, message: String, code: &'static str) -> PyErr {
    build(
        class,
        message,
        Detail {
            code,
            ..Detail::default()
        },
        |_, _| Ok(()),
    )
}

/// Not Arrow data, or Arrow data that cannot be read.
pub(crate) fn input(message: String) -> PyErr {
    plain("InputError", message, "input")
}

/// The sink is closed.
pub(crate) fn closed(what: &str) -> PyErr {
    plain(
        "ClosedError",
        format!("{what}: the sink is closed"),
        "closed",
    )
}

/// A source position that does not follow the previous one of its partition.
pub(crate) fn source(table: &str, message: String) -> PyErr {
    build(
        "SourceError",
        message,
        Detail {
            table: Some(table.to_owned()),
            code: "source_position",
            ..Detail::default()
        },
        |_, _| Ok(()),
    )
}

/// A settings file or keyword that is refused, or a sink that cannot start.
pub(crate) fn config(e: &ConfigFileError) -> PyErr {
    plain("ConfigError", e.to_string(), "config")
}

/// Batches handed back undelivered.
pub(crate) fn delivery(message: String, table: Option<String>, failures: Vec<Py<PyAny>>) -> PyErr {
    build(
        "DeliveryError",
        message,
        Detail {
            table,
            code: "not_durable",
            retryable: true,
            ..Detail::default()
        },
        |py, kwargs| kwargs.set_item("failures", pyo3::types::PyList::new(py, failures)?),
    )
}

/// A flush that found batches handed back.
pub(crate) fn flush(e: &FlushError, failures: Vec<Py<PyAny>>) -> PyErr {
    match e {
        FlushError::Stopped => closed("flush"),
        _ => delivery(e.to_string(), None, failures),
    }
}

/// A send refused before anything was sent. `name` is the table's name.
pub(crate) fn send(name: &str, e: &SendError<Raw>) -> PyErr {
    let message = e.to_string();
    let table = Some(name.to_owned());
    match e {
        SendError::Unreconcilable { columns, .. } => build(
            "SchemaError",
            message,
            Detail {
                table,
                column: columns.first().map(refused_column),
                code: "unreconcilable",
                retryable: false,
            },
            |_, kwargs| {
                let names: Vec<String> = columns.iter().map(refused_column).collect();
                kwargs.set_item("columns", names)
            },
        ),
        SendError::SchemaMismatch { .. } => build(
            "SchemaError",
            message,
            Detail {
                table,
                code: "schema_mismatch",
                ..Detail::default()
            },
            |_, _| Ok(()),
        ),
        SendError::BadRows { faults, .. } => build(
            "BadRowsError",
            message,
            Detail {
                table,
                column: faults.iter().find_map(|f| f.column.clone()),
                code: "bad_rows",
                retryable: false,
            },
            |_, kwargs| {
                let rows: Vec<usize> = faults.iter().map(|f| f.row).collect();
                kwargs.set_item("rows", rows)
            },
        ),
        SendError::Stopped { .. } => closed(&format!("send to {name}")),
        _ => build(
            "SendError",
            message,
            Detail {
                table,
                code: "rejected",
                ..Detail::default()
            },
            |_, _| Ok(()),
        ),
    }
}

fn refused_column(c: &ColumnRefusal) -> String {
    match c {
        ColumnRefusal::NestedIntoString { column, .. }
        | ColumnRefusal::ZonedIntoNtz { column, .. }
        | ColumnRefusal::Unconvertible { column, .. }
        | ColumnRefusal::NotInTable { column, .. }
        | ColumnRefusal::MissingRequired { column, .. } => column.clone(),
        other => other.to_string(),
    }
}
