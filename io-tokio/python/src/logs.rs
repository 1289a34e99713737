//! The sink's `tracing` events as records of Python's `logging`, on the logger `zerobus_sink`
//! (never on stderr). Events are queued and a thread of their own hands them to `logging`, so
//! no runtime worker ever waits for the GIL. Which levels are forwarded follows the logger's
//! effective level when a sink starts (`logging.getLogger("zerobus_sink").setLevel(...)`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// Python's numeric level below which events are not forwarded (WARNING by default).
static THRESHOLD: AtomicU8 = AtomicU8::new(30);

/// Held by the forwarding thread while it calls into Python, and set once the interpreter is
/// exiting (`atexit`): from then on records are dropped. A thread that takes the GIL while
/// the interpreter finalizes is ended by CPython (< 3.14) with `pthread_exit`, which aborts
/// the process when it unwinds through Rust frames.
static EXITING: Mutex<bool> = Mutex::new(false);

enum Item {
    Record {
        level: u8,
        message: String,
    },
    /// Answered once every record queued before it was handed to `logging`.
    Flush(SyncSender<()>),
}

fn queue() -> &'static Mutex<Sender<Item>> {
    static QUEUE: OnceLock<Mutex<Sender<Item>>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("zerobus-sink-log".into())
            .spawn(move || forward(&rx))
            .ok();
        Mutex::new(tx)
    })
}

fn forward(rx: &Receiver<Item>) {
    while let Ok(item) = rx.recv() {
        match item {
            Item::Record { level, message } => {
                let exiting = EXITING
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *exiting {
                    return;
                }
                let delivered = Python::try_attach(|py| {
                    let _ = py
                        .import("logging")
                        .and_then(|l| l.call_method1("getLogger", ("zerobus_sink",)))
                        .and_then(|logger| logger.call_method1("log", (level, "%s", message)));
                });
                drop(exiting);
                if delivered.is_none() {
                    return;
                }
            }
            Item::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Installs the bridge as the process's `tracing` subscriber (once) and reads the logger's
/// effective level.
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let _ = tracing_subscriber::registry().with(Bridge).try_init();
    });
    let level: u8 = py
        .import("logging")?
        .call_method1("getLogger", ("zerobus_sink",))?
        .call_method0("getEffectiveLevel")?
        .extract::<u32>()?
        .min(u32::from(u8::MAX))
        .try_into()
        .unwrap_or(u8::MAX);
    THRESHOLD.store(level, Ordering::Relaxed);
    Ok(())
}

/// Stops forwarding for good; registered with `atexit` by the package. Waits (GIL released)
/// for a record being handed over to finish.
#[pyfunction]
pub(crate) fn stop_logs(py: Python<'_>) {
    py.detach(|| {
        *EXITING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    });
}

/// Waits until every event so far has reached `logging` (GIL released while waiting).
#[pyfunction]
pub(crate) fn flush_logs(py: Python<'_>) {
    let (tx, rx) = sync_channel(1);
    let sent = queue()
        .lock()
        .map(|q| q.send(Item::Flush(tx)).is_ok())
        .unwrap_or(false);
    if sent {
        py.detach(move || {
            let _ = rx.recv();
        });
    }
}

fn python_level(level: Level) -> u8 {
    match level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

struct Bridge;

impl<S: Subscriber> Layer<S> for Bridge {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let level = python_level(*meta.level());
        if level < THRESHOLD.load(Ordering::Relaxed) || !meta.target().starts_with("zerobus") {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let message = if text.fields.is_empty() {
            text.message
        } else {
            format!("{}{}", text.message, text.fields)
        };
        if let Ok(q) = queue().lock() {
            let _ = q.send(Item::Record { level, message });
        }
    }
}

/// An event as one line: its message, then `key=value` for each field.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}
