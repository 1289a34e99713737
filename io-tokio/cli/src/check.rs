//! `zerobus-sinkctl check`: the file parsed and checked, what it derives, and what the catalog
//! would do (planned, not executed).

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use arrow_schema::SchemaRef;
use zerobus_sink_tokio::settings::SinkFile;

use crate::input;

pub async fn run(path: &Path, offline: bool, schema_args: &[String]) -> ExitCode {
    let file = match SinkFile::load(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut schemas: HashMap<String, SchemaRef> = HashMap::new();
    for arg in schema_args {
        let Some((table, source)) = arg.split_once('=') else {
            eprintln!("--schema {arg}: expected TABLE=FILE");
            return ExitCode::from(2);
        };
        match input::open(Path::new(source), 1, None) {
            Ok(i) => {
                schemas.insert(table.to_owned(), i.schema);
            }
            Err(e) => {
                eprintln!("--schema {arg}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let effective = match file.effective() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Online, what the file names is checked too (its environment variables, the CA file, the
    // catalog's settings) before anything is called ok; --offline checks the file alone.
    let catalog = match offline {
        true => None,
        false => {
            if let Err(e) = file.config() {
                eprintln!("refused: {e}");
                return ExitCode::FAILURE;
            }
            match file.catalog_with_env(|n| std::env::var(n).ok()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("refused: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    println!(
        "{}: {} ({} sink -> {})",
        match offline {
            true => "file ok (offline: environment, CA file and catalog not checked)",
            false => "config ok",
        },
        path.display(),
        effective.lane,
        effective.endpoint
    );
    let (batches, bytes, rows) = effective.window;
    println!(
        "streams: at most {} open; window per stream {batches} batches, {bytes} bytes, {rows} rows; \
         close drains {:?}",
        effective.max_open_streams, effective.drain
    );
    println!("tables:");
    for (name, role, pool) in &effective.tables {
        println!(
            "  {name}  {role}  {} stream(s) (by bytes {}, by rows {}{})",
            pool.slots,
            pool.by_bytes,
            pool.by_rows,
            if pool.capped { ", capped" } else { "" }
        );
    }
    if offline {
        return ExitCode::SUCCESS;
    }
    let Some(catalog) = catalog else {
        println!("catalog: none (tables are taken as they are)");
        return ExitCode::SUCCESS;
    };
    println!(
        "catalog: {}; what reconciling would do (not executed):",
        catalog.backend()
    );
    let mut ok = true;
    for plan in file.dry_run(&catalog, |t| schemas.get(t).cloned()).await {
        match plan.outcome {
            Ok(p) => {
                let refused = p.refusals();
                ok &= refused.is_empty();
                println!("  {}", p.to_string().replace('\n', "\n  "));
            }
            Err(reason) => {
                ok = false;
                println!("  {}: cannot plan: {reason}", plan.table);
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
