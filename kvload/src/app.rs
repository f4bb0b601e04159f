//! The program: parse, run, report, and map failures to exit codes with one
//! line on stderr.

use std::io::Write;

use clap::Parser;

use crate::Error;
use crate::config::{Cli, Config};
use crate::engine;
use crate::output::{Report, json, text};

/// Runs kvload with the process arguments and returns the exit code.
pub fn main() -> i32 {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("kvload: error: internal error: {msg}{at} (please report this)");
    }));
    match std::panic::catch_unwind(run_args) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("kvload: error: {e}");
            e.exit_code()
        }
        Err(_) => 1,
    }
}

fn run_args() -> Result<(), Error> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Ok(());
            }
            let rendered = e.render().to_string();
            let line = rendered.lines().next().unwrap_or("invalid arguments");
            let line = line.strip_prefix("error: ").unwrap_or(line);
            return Err(Error::usage(format!("{line} (see kvload --help)")));
        }
    };
    if cli.trace.is_some() && (cli.search.is_some() || cli.ramp.is_some()) {
        return Err(Error::usage(
            "--trace replays recorded times: it does not combine with --search or --ramp (scale it with --rate-scale)",
        ));
    }
    let plan = crate::steps::Plan::from_cli(&cli)?;
    let cfg = Config::build_with_rate(cli, plan.as_ref().map(|p| p.nominal_rate()))?;
    if let Some(plan) = plan {
        return crate::steps::run(&plan, &cfg);
    }
    let run_cfg = cfg.clone();
    let result = engine::run(run_cfg)?;
    let report = Report::new(&cfg, &result);
    if let Some(path) = &cfg.dump_arrivals {
        write_arrivals(path, &result.arrivals)?;
    }
    let doc = json::document(&report);
    let to_stdout = cfg.json.as_deref() == Some("-");
    if !cfg.quiet {
        let s = text::summary(&report);
        if to_stdout {
            eprint!("{s}");
        } else {
            print!("{s}");
        }
    }
    if let Some(dest) = &cfg.json {
        let mut body = serde_json::to_string_pretty(&doc).expect("JSON serializes");
        body.push('\n');
        if dest == "-" {
            std::io::stdout()
                .write_all(body.as_bytes())
                .map_err(|e| Error::runtime(format!("--json -: {e}")))?;
        } else {
            std::fs::write(dest, body)
                .map_err(|e| Error::runtime(format!("--json {dest}: {e}")))?;
        }
    }
    Ok(())
}

fn write_arrivals(path: &std::path::Path, arrivals: &[(usize, i64, i64)]) -> Result<(), Error> {
    let mut sorted = arrivals.to_vec();
    sorted.sort_unstable_by_key(|a| (a.1, a.0));
    let mut out = String::with_capacity(sorted.len() * 24);
    out.push_str("# thread intended_ns sent_ns (ns since the window start)\n");
    for (t, i, s) in &sorted {
        use std::fmt::Write as _;
        let _ = writeln!(out, "{t} {i} {s}");
    }
    std::fs::write(path, out)
        .map_err(|e| Error::runtime(format!("--dump-arrivals {}: {e}", path.display())))
}
