//! The emulator's counters in the Prometheus text format, for `zerobus-local --metrics-addr`.

use std::fmt::Write;

use super::Stats;

impl Stats {
    /// Every counter as a Prometheus sample (`zerobus_local_*`); tokens are never shown, only
    /// how many were presented.
    #[must_use]
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let counters: [(&str, &str, u64); 17] = [
            ("calls_total", "DoPut calls received", self.calls),
            ("ready_total", "calls answered with READY", self.ready),
            (
                "messages_total",
                "record batch messages logged",
                self.messages,
            ),
            ("rows_total", "rows logged", self.rows),
            ("acks_total", "acks sent (READY not counted)", self.acks),
            (
                "half_closes_total",
                "calls the client half-closed",
                self.half_closes,
            ),
            ("resets_total", "request streams that broke", self.resets),
            (
                "errors_total",
                "calls ended with an error status",
                self.errors,
            ),
            (
                "tokens_presented_total",
                "bearer tokens presented",
                self.tokens.len() as u64,
            ),
            (
                "recovered_messages_total",
                "messages recovered from the logs at start",
                self.recovered_messages,
            ),
            (
                "materialized_rows_total",
                "rows landed in Delta tables",
                self.materialized_rows,
            ),
            (
                "materialized_commits_total",
                "Delta commits made",
                self.materialized_commits,
            ),
            (
                "materialize_errors_total",
                "materializer rounds that failed",
                self.materialize_errors,
            ),
            (
                "repeated_acks_total",
                "acks sent again with a count already acked (faults)",
                self.repeated_acks,
            ),
            (
                "fallback_rows_total",
                "acked rows written to a fallback directory, not the table",
                self.fallback_rows,
            ),
            (
                "fallback_files_total",
                "Parquet files written to fallback directories",
                self.fallback_files,
            ),
            (
                "throttled_acks_total",
                "acks held back for the stream limits",
                self.throttled_acks,
            ),
        ];
        for (name, help, value) in counters {
            sample(&mut out, name, "counter", help, value);
        }
        let _ = writeln!(
            out,
            "# HELP zerobus_local_refused_total calls refused at open, by status code"
        );
        let _ = writeln!(out, "# TYPE zerobus_local_refused_total counter");
        for (code, n) in &self.refused {
            let _ = writeln!(out, "zerobus_local_refused_total{{code=\"{code}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP zerobus_local_table_refusals_total streams ended for a table that breaks the \
             service's table requirements, by requirement"
        );
        let _ = writeln!(out, "# TYPE zerobus_local_table_refusals_total counter");
        for (requirement, n) in &self.table_refusals {
            let _ = writeln!(
                out,
                "zerobus_local_table_refusals_total{{requirement=\"{requirement}\"}} {n}"
            );
        }
        let gauges: [(&str, &str, u64); 2] = [
            (
                "max_open_per_table",
                "most streams open at once on one table",
                self.max_open_per_table as u64,
            ),
            (
                "max_unacked_rows",
                "most rows read from one stream and not yet acked",
                self.max_unacked_rows,
            ),
        ];
        for (name, help, value) in gauges {
            sample(&mut out, name, "gauge", help, value);
        }
        out
    }
}

/// One unlabelled sample with its HELP and TYPE lines.
fn sample(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP zerobus_local_{name} {help}");
    let _ = writeln!(out, "# TYPE zerobus_local_{name} {kind}");
    let _ = writeln!(out, "zerobus_local_{name} {value}");
}
