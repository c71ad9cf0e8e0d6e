//! kubectl-numaplane: `kubectl numaplane get|list|pause|resume|allow-data-loss|promote|abort|retry|history|wait|plan|dashboard|version|completion`.

mod cli;
mod cluster;
mod commands;
mod dashboard;
mod manifests;
mod render;
mod tree;

use clap::Parser;
use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            1
        }
    };
    std::process::exit(code);
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    // What needs no cluster.
    match &cli.command {
        Command::Completion(args) => {
            use clap::CommandFactory;
            // Into memory first: clap_complete panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "kubectl-numaplane",
                &mut script,
            );
            use std::io::Write as _;
            return match std::io::stdout().write_all(&script) {
                Ok(()) => Ok(commands::EXIT_OK),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(commands::EXIT_OK),
                Err(e) => Err(anyhow::Error::new(e).context("writing the completion script")),
            };
        }
        Command::Version(args) if args.client => {
            println!("{}", commands::version::client());
            return Ok(commands::EXIT_OK);
        }
        _ => {}
    }
    let cluster = cluster::Cluster::connect(&cli.global).await?;
    match &cli.command {
        Command::Get(args) => commands::get::run(&cluster, args).await,
        Command::List(args) => commands::list::run(&cluster, args).await,
        Command::Pause(args) => commands::pause::pause(&cluster, args).await,
        Command::Resume(args) => commands::pause::resume(&cluster, args).await,
        Command::AllowDataLoss(args) => commands::pause::allow_data_loss(&cluster, args).await,
        Command::Wait(args) => commands::wait::run(&cluster, args).await,
        Command::Promote(args) => commands::promote::run(&cluster, args).await,
        Command::Abort(args) => commands::promote::abort(&cluster, args).await,
        Command::Retry(args) => commands::promote::retry(&cluster, args).await,
        Command::History(args) => commands::history::run(&cluster, args).await,
        Command::Plan(args) => commands::plan::run(&cluster, args).await,
        Command::Dashboard(args) => {
            dashboard::run(&cluster, args, cli.global.namespace.as_deref()).await
        }
        Command::Version(_) => commands::version::run(&cluster).await,
        Command::Completion(_) => Ok(commands::EXIT_OK),
    }
}

/// The error and its causes on one line (`a: b: c`), without repeated parts.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if parts.last().is_none_or(|p| !p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
