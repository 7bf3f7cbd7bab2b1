//! The `payroll` command line: server side (`serve`, `migrate`, `admin`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "payroll",
    version,
    about = "Payroll disbursement service: pay employees in USDC through an exchange account.",
    after_help = "Examples:\n  payroll serve                       # SQLite in ./data, sandbox exchange, on 127.0.0.1:8080\n  payroll admin create-key --name ops --scopes payroll:read,payroll:write\n  PAYROLL__DATABASE__URL=postgres://localhost/payroll payroll migrate"
)]
pub struct Cli {
    /// A configuration file overlaying the defaults (after config/{PAYROLL_ENV}.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service (migrates the database first).
    Serve,
    /// Bring the database schema up to date, then exit.
    Migrate,
    /// Administration on the server's own database.
    #[command(subcommand)]
    Admin(AdminCommand),
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an API key and print it (with its plaintext, shown once) as JSON on stdout.
    #[command(
        after_help = "Example:\n  payroll admin create-key --name payroll-agent --scopes payroll:read,payroll:write,employees:read"
    )]
    CreateKey {
        /// Who or what uses the key.
        #[arg(long)]
        name: String,
        /// Comma-separated scopes or wildcards (payroll:*, employees:*, treasury:*).
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// When the key stops working (date-time or date).
        #[arg(long, value_name = "TIME")]
        expires_at: Option<String>,
    },
    /// The sandbox exchange (the embedded default provider).
    #[command(subcommand)]
    Sandbox(SandboxCommand),
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Change a sandbox balance from outside, as a movement on the exchange's own website would.
    #[command(
        after_help = "Examples:\n  payroll admin sandbox adjust --account exchange --delta-usd-cents 500000\n  payroll admin sandbox adjust --account treasury --delta-usd-cents=-1000"
    )]
    Adjust {
        /// `exchange` or `treasury`.
        #[arg(long, value_parser = ["exchange", "treasury"])]
        account: String,
        /// Cents to add (negative to take away).
        #[arg(long, allow_hyphen_values = true)]
        delta_usd_cents: i64,
    },
}
