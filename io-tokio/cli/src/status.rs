//! `zerobus-sinkctl status`: a running sink's health tree, from its operator endpoint.

use std::process::ExitCode;

use serde_json::Value;

pub async fn run(url: &str, json: bool) -> ExitCode {
    let endpoint = format!("{}/health", url.trim_end_matches('/'));
    let response = match reqwest::get(&endpoint).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{endpoint}: no answer: {e}");
            return ExitCode::from(2);
        }
    };
    let body = match response.text().await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{endpoint}: {e}");
            return ExitCode::from(2);
        }
    };
    let tree: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{endpoint}: not a health tree ({e})");
            return ExitCode::from(2);
        }
    };
    if json {
        println!("{body}");
    } else {
        print!("{}", render(&tree));
    }
    if tree["healthy"] == true {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn seconds(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "never".into(), |s| format!("{s:.1} s ago"))
}

/// The tree, one line per level.
fn render(tree: &Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if tree["closed"] == true {
        return "sink closed\n".into();
    }
    let _ = writeln!(
        out,
        "{} sink: {}, up {:.1} s, {} stream(s) open, {} batch(es) waiting to resubmit{}",
        tree["lane"].as_str().unwrap_or("?"),
        if tree["healthy"] == true {
            "healthy"
        } else {
            "UNHEALTHY"
        },
        tree["uptime"].as_f64().unwrap_or(0.0),
        tree["open_streams"],
        tree["waiting_to_resubmit"],
        if tree["closing"] == true {
            ", closing"
        } else {
            ""
        },
    );
    for t in tree["tables"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {}: {}{}, {} queued",
            t["name"].as_str().unwrap_or("?"),
            if t["failed"] == true { "FAILED" } else { "ok" },
            if t["backpressure"] == true {
                ", backpressure"
            } else {
                ""
            },
            t["queued_batches"],
        );
        for s in t["streams"].as_array().into_iter().flatten() {
            let _ = write!(
                out,
                "    stream {}: {}, last ack {}, window {:.0}%, {} pending",
                s["stream"],
                s["phase"].as_str().unwrap_or("?"),
                seconds(&s["last_ack_age"]),
                s["window_fill"].as_f64().unwrap_or(0.0) * 100.0,
                s["pending_batches"],
            );
            if let Some(e) = s["last_error"].as_str() {
                let _ = write!(out, ", last error: {e}");
            }
            out.push('\n');
        }
    }
    out
}
