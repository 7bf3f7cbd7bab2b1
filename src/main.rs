use std::process::ExitCode;

/// mimalloc rather than glibc's allocator: the service allocates and frees many small objects
/// on a few threads, and glibc spent about a third of the main thread's time in malloc and
/// free while keeping freed memory in per-thread arenas (docs/benchmarks.md). It also stands
/// in for `malloc` and `free` themselves (the crate's `override`), so SQLite, which allocates
/// through them (its page cache a page at a time), uses it too. Its version 2 (`v2`): with
/// version 3's override the binary crashed at start under a preloaded library (`LD_PRELOAD`,
/// as libfaketime is). It leaves transparent huge pages alone (`no_thp`), which held whole
/// 2 MB pages resident for a few small objects.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches};
use payroll::{
    cli::{
        admin,
        args::{AdminCommand, Cli, Command, ExchangeCommand, SandboxCommand},
        client::{Client, Failure},
        commands,
    },
    config::Settings,
    startup::{self, Application},
    telemetry,
};

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&Cli::command_with_help().get_matches()) {
        Ok(cli) => cli,
        Err(err) => err.format(&mut Cli::command_with_help()).exit(),
    };
    match cli.command {
        Command::Serve | Command::Migrate | Command::Admin(_) => server(cli),
        Command::Mcp => mcp(cli),
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "payroll", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        _ => client(cli),
    }
}

/// The API client of a client command: flags and environment over the profile.
fn api_client(cli: &Cli) -> Result<Client, Failure> {
    let profile = payroll::cli::client::load_profile(cli.profile.as_deref())?;
    let base_url = cli
        .base_url
        .clone()
        .or(profile.base_url)
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let api_key = cli.api_key.clone().or(profile.api_key);
    let ca_cert = cli.ca_cert.clone().or(profile.ca_cert);
    Client::new(
        &base_url,
        api_key,
        cli.format,
        cli.idempotency_key.clone(),
        ca_cert.as_deref(),
    )
}

/// `payroll mcp`: the MCP server on stdio, until the host closes it.
fn mcp(cli: Cli) -> ExitCode {
    actix_web::rt::System::new().block_on(async move {
        let client = match api_client(&cli) {
            Ok(client) => client,
            Err(failure) => return report(&failure),
        };
        match payroll::mcp::serve(client).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("payroll: {err:#}");
                ExitCode::FAILURE
            }
        }
    })
}

/// A client command: one API operation over HTTP.
fn client(cli: Cli) -> ExitCode {
    let result = actix_web::rt::System::new().block_on(async move {
        let client = api_client(&cli)?;
        commands::execute(&client, cli.command).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(&failure),
    }
}

/// Says why a client command failed (an API error was printed already) and gives its exit code.
fn report(failure: &Failure) -> ExitCode {
    match failure {
        Failure::Usage(why) => eprintln!("payroll: {why}"),
        Failure::Unreachable(why) => eprintln!("payroll: the server could not be reached: {why}"),
        Failure::BadAnswer(why) => eprintln!("payroll: the server's answer was refused: {why}"),
        Failure::Api | Failure::WaitTimedOut => {}
    }
    ExitCode::from(failure.exit_code())
}

/// A server-side command on the configured database.
fn server(cli: Cli) -> ExitCode {
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("payroll: {err}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(&settings.log);
    let result = actix_web::rt::System::new().block_on(async move {
        match cli.command {
            Command::Serve => {
                Application::build(settings)
                    .await?
                    .run_until_stopped()
                    .await
            }
            Command::Migrate => {
                startup::connect_and_migrate(&settings).await?;
                eprintln!("payroll: database is up to date");
                Ok(())
            }
            Command::Admin(AdminCommand::CreateKey {
                name,
                scopes,
                expires_at,
            }) => {
                let key =
                    admin::create_key(&settings, &name, &scopes, expires_at.as_deref()).await?;
                println!("{}", serde_json::to_string_pretty(&key)?);
                Ok(())
            }
            Command::Admin(AdminCommand::Sandbox(SandboxCommand::Adjust {
                account,
                delta_usd_cents,
            })) => {
                let balance = admin::adjust_sandbox(&settings, &account, delta_usd_cents).await?;
                println!("{}", serde_json::to_string_pretty(&balance)?);
                Ok(())
            }
            Command::Admin(AdminCommand::Exchange(ExchangeCommand::Check)) => {
                let (report, passed) = admin::check_exchange(&settings).await?;
                println!("{}", serde_json::to_string_pretty(&report)?);
                if passed {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(
                        "the exchange check failed: {}",
                        report["failed"]
                    ))
                }
            }
            _ => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("payroll: {err:#}");
            ExitCode::FAILURE
        }
    }
}
