//! A cloneable view of a running sink: its report and its health tree, for an operator
//! endpoint or a progress display beside the pipeline. It asks the driver on the control
//! channel, which never waits behind a `send` that waits for room.

use tokio::sync::{mpsc, oneshot};

use crate::driver::command::Control;
use crate::health::SinkHealth;
use crate::report::Report;

/// Asks a running sink for its report and health ([`ZerobusSink::observer`]). Holding one
/// does not keep the sink open: once the sink is closed, both answers are `None`.
///
/// [`ZerobusSink::observer`]: crate::ZerobusSink::observer
#[derive(Clone, Debug)]
pub struct Observer {
    control: mpsc::UnboundedSender<Control>,
}

impl Observer {
    pub(crate) fn new(control: mpsc::UnboundedSender<Control>) -> Observer {
        Observer { control }
    }

    /// Progress so far (`None` once the sink is closed).
    pub async fn report(&self) -> Option<Report> {
        let (tx, rx) = oneshot::channel();
        self.control.send(Control::Report(tx)).ok()?;
        rx.await.ok()
    }

    /// The health tree now (`None` once the sink is closed).
    pub async fn health(&self) -> Option<SinkHealth> {
        let (tx, rx) = oneshot::channel();
        self.control.send(Control::Health(tx)).ok()?;
        rx.await.ok()
    }
}
