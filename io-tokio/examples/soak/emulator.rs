//! zerobus-local as a child process: started on one port and restarted there after each
//! `kill -9`, so the sink reconnects to the same endpoint and the write-ahead log carries over.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The running emulator.
pub struct Local {
    binary: PathBuf,
    dir: PathBuf,
    pub addr: String,
    extra: Vec<String>,
    child: Option<Child>,
    /// `kill -9`s so far.
    pub kills: u32,
}

impl Local {
    /// Starts the binary with its tables and WAL under `dir`, on a port of its choosing.
    pub fn start(binary: &Path, dir: &Path) -> Result<Local, String> {
        Local::start_with(binary, dir, &[])
    }

    /// [`start`](Local::start) with more flags.
    pub fn start_with(binary: &Path, dir: &Path, extra: &[&str]) -> Result<Local, String> {
        let mut local = Local {
            binary: binary.to_owned(),
            dir: dir.to_owned(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            addr: "127.0.0.1:0".into(),
            child: None,
            kills: 0,
        };
        local.spawn()?;
        Ok(local)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut child = Command::new(&self.binary)
            .args(["--addr", &self.addr])
            .arg("--tables")
            .arg(self.dir.join("tables"))
            .arg("--wal-dir")
            .arg(self.dir.join("wal"))
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        let mut first = String::new();
        let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        out.read_line(&mut first)
            .map_err(|e| format!("zerobus-local said nothing: {e}"))?;
        let addr = first
            .split("listening on http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(|| format!("zerobus-local did not start: {first}"))?;
        self.addr = addr.to_owned();
        // Keep reading its output so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        self.child = Some(child);
        Ok(())
    }

    /// The endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `kill -9`, then a restart on the same port.
    pub fn kill9_and_restart(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            self.kills += 1;
        }
        self.spawn()
    }

    /// SIGINT and wait: it materializes every acked row, then exits.
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .map_err(|e| format!("kill -INT: {e}"))?;
        if !status.success() {
            return Err("kill -INT failed".into());
        }
        let code = child.wait().map_err(|e| e.to_string())?;
        if code.success() {
            Ok(())
        } else {
            Err(format!("zerobus-local stopped with {code}"))
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
