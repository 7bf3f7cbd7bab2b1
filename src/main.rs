use std::process::ExitCode;

use clap::Parser;
use payroll::{
    admin,
    cli::{AdminCommand, Cli, Command, SandboxCommand},
    config::Settings,
    startup::{self, Application},
    telemetry,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
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
