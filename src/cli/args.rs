//! The `payroll` command line: server side (`serve`, `migrate`, `admin`) and client side
//! (every API operation, with the same API key and JSON).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::cli::client::Format;

#[derive(Debug, Parser)]
#[command(
    name = "payroll",
    version,
    about = "Payroll disbursement service: pay employees in USDC through an exchange account.",
    after_help = "Examples:\n  payroll serve                                  # SQLite in ./data, sandbox exchange, on 127.0.0.1:8080\n  export PAYROLL_API_KEY=mpk_live_…\n  payroll employees import staff.csv\n  payroll runs create --period-start 2026-03-01 --period-end 2026-03-31 --label March\n  payroll runs execute run_… --wait\n  payroll runs list | jq '.data[0].id'"
)]
pub struct Cli {
    /// A configuration file overlaying the defaults (server commands).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// API key, or an agent session's token (client commands).
    #[arg(long, global = true, env = "PAYROLL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Where the service listens (client commands; default http://127.0.0.1:8080).
    #[arg(long, global = true, env = "PAYROLL_BASE_URL")]
    pub base_url: Option<String>,
    /// A profile of ~/.config/payroll/config.toml supplying base_url, api_key and ca_cert.
    #[arg(long, global = true, env = "PAYROLL_PROFILE")]
    pub profile: Option<String>,
    /// A PEM file of CA certificates to trust, beside the public roots, for an https://
    /// base URL (client commands).
    #[arg(long, global = true, env = "PAYROLL_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Output: the API's JSON (default when stdout is not a terminal), a table (default on a
    /// terminal) or CSV (lists).
    #[arg(short = 'f', long, global = true, value_enum)]
    pub format: Option<Format>,
    /// Idempotency-Key of this invocation's write (default: a new UUID v4).
    #[arg(long, global = true, value_name = "UUID")]
    pub idempotency_key: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// The options of server commands (`serve`, `migrate`, `admin …`).
const SERVER_OPTIONS: &[&str] = &["config"];
/// The options of client commands (every API operation, `mcp`).
const CLIENT_OPTIONS: &[&str] = &[
    "api_key",
    "base_url",
    "profile",
    "ca_cert",
    "format",
    "idempotency_key",
];
/// Subcommands that are neither: they take no option of either kind.
const NEITHER: &[&str] = &["openapi", "completions"];

impl Cli {
    /// The command line as parsed, with each subcommand's help listing only the options that
    /// apply to it: server options under `serve`, `migrate` and `admin`, client options under
    /// the API's commands. The options stay global for parsing, so an environment variable
    /// such as `PAYROLL_API_KEY` set for the client never stops a server command.
    pub fn command_with_help() -> clap::Command {
        use clap::CommandFactory;
        let mut command = Self::command();
        let names: Vec<String> = command
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        for name in names {
            let hidden: Vec<&str> = if ["serve", "migrate", "admin"].contains(&name.as_str()) {
                CLIENT_OPTIONS.to_vec()
            } else if NEITHER.contains(&name.as_str()) {
                CLIENT_OPTIONS
                    .iter()
                    .chain(SERVER_OPTIONS)
                    .copied()
                    .collect()
            } else {
                SERVER_OPTIONS.to_vec()
            };
            // A subcommand that has a global option of its own already is skipped when the
            // root's are handed down: give it the same option, hidden (still global, so its
            // own subcommands take it too and a value given there reaches the root).
            let copies: Vec<clap::Arg> = command
                .get_arguments()
                .filter(|a| hidden.contains(&a.get_id().as_str()))
                .map(|a| a.clone().hide(true))
                .collect();
            command = command
                .mut_subcommand(name, |sub| copies.into_iter().fold(sub, clap::Command::arg));
        }
        command
    }
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
    /// Payroll runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Single payouts.
    #[command(subcommand)]
    Payouts(PayoutsCommand),
    /// Execution jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Employees (payees).
    #[command(subcommand)]
    Employees(EmployeesCommand),
    /// Exchange account and treasury wallet.
    #[command(subcommand)]
    Treasury(TreasuryCommand),
    /// API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Agent sessions: part of this key's scopes delegated to an agent for a bounded time.
    #[command(subcommand)]
    AgentSessions(AgentSessionsCommand),
    /// Approvals of money-moving requests (agents' requests, or all with approvals.required).
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// The audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Emitted events.
    #[command(subcommand)]
    Events(EventsCommand),
    /// Webhook endpoints and their deliveries.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Print the OpenAPI document.
    Openapi,
    /// Serve the Model Context Protocol on stdio: one tool per API operation the key's scopes
    /// allow, for an agent host (Claude Desktop, an IDE, an MCP SDK).
    #[command(
        after_help = "Example (an MCP host's configuration):\n  {\"mcpServers\": {\"payroll\": {\"command\": \"payroll\", \"args\": [\"mcp\"],\n    \"env\": {\"PAYROLL_API_KEY\": \"mpk_live_…\", \"PAYROLL_BASE_URL\": \"http://127.0.0.1:8080\"}}}}"
    )]
    Mcp,
    /// Print shell completions.
    #[command(after_help = "Example:\n  payroll completions bash > /etc/bash_completion.d/payroll")]
    Completions { shell: clap_complete::Shell },
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
    /// The configured exchange provider (sandbox, okx or binance).
    #[command(subcommand)]
    Exchange(ExchangeCommand),
}

#[derive(Debug, Subcommand)]
pub enum ExchangeCommand {
    /// Check the connection to the exchange: credentials, withdrawal permission (where the
    /// exchange tells), balance and deposit address, and each network's terms (can withdraw,
    /// fee, minimum). Prints JSON; exits 1 when a check failed.
    #[command(
        after_help = "Example:\n  PAYROLL__EXCHANGE__PROVIDER=binance payroll admin exchange check"
    )]
    Check,
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
        /// Cents to add (negative to take away), at most 100,000,000,000 either way.
        #[arg(long, allow_hyphen_values = true,
              value_parser = clap::value_parser!(i64).range(-100_000_000_000..=100_000_000_000))]
        delta_usd_cents: i64,
    },
}

/// `--wait` and its knobs.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Poll sync until every payout is terminal.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds (exit code 4).
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Seconds between polls.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
}

#[derive(Debug, Args)]
pub struct Page {
    #[arg(long)]
    pub limit: Option<u64>,
    #[arg(long)]
    pub offset: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    #[command(after_help = "Example:\n  payroll runs list --status PAYING_OUT -f table")]
    List {
        #[arg(long)]
        status: Option<String>,
        #[arg(long = "type")]
        run_type: Option<String>,
        #[arg(long)]
        is_adhoc: Option<bool>,
        #[arg(long)]
        is_test_run: Option<bool>,
        #[arg(long)]
        include_archived: bool,
        #[arg(long)]
        created_after: Option<String>,
        #[arg(long)]
        created_before: Option<String>,
        /// created_at, -created_at, total_amount_usd_cents, -total_amount_usd_cents
        #[arg(long, allow_hyphen_values = true)]
        sort: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Show a run.
    #[command(after_help = "Example:\n  payroll runs get run_01…")]
    Get { run_id: String },
    /// Create a run (DRAFT); a regular run pays every ACTIVE salaried employee by default.
    #[command(
        after_help = "Examples:\n  payroll runs create --period-start 2026-03-01 --period-end 2026-03-31 --label \"March 2026\"\n  payroll runs create --type ad_hoc --period-start 2026-03-01 --period-end 2026-03-31 --items '[{\"employee_id\":\"emp_…\",\"amount_usd_cents\":50000}]'"
    )]
    Create {
        #[arg(long)]
        period_start: String,
        #[arg(long)]
        period_end: String,
        #[arg(long)]
        pay_date: Option<String>,
        #[arg(long)]
        label: Option<String>,
        #[arg(long)]
        note: Option<String>,
        /// regular (default), ad_hoc or reimbursement.
        #[arg(long = "type")]
        run_type: Option<String>,
        #[arg(long)]
        is_test_run: bool,
        /// Comma-separated employee ids (regular runs).
        #[arg(long, value_delimiter = ',')]
        employee_ids: Option<Vec<String>>,
        /// JSON array of {employee_id, amount_usd_cents, note?}, or @FILE.
        #[arg(long)]
        items: Option<String>,
    },
    /// Confirm a DRAFT run: amounts, fees and addresses are locked.
    #[command(after_help = "Example:\n  payroll runs confirm run_01…")]
    Confirm { run_id: String },
    /// Check the exchange covers the run; a covered CONFIRMED run becomes DEPOSITED.
    #[command(after_help = "Example:\n  payroll runs balance-check run_01…")]
    BalanceCheck { run_id: String },
    /// Execute a DEPOSITED run: withdrawals start and payees are emailed.
    #[command(after_help = "Example:\n  payroll runs execute run_01… --wait")]
    Execute {
        run_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Reconcile a run with the exchange once (or until done, with --wait).
    #[command(after_help = "Example:\n  payroll runs sync run_01… --wait --timeout 600")]
    Sync {
        run_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Cancel a run that has not started paying.
    #[command(after_help = "Example:\n  payroll runs cancel run_01… --reason \"wrong period\"")]
    Cancel {
        run_id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Send a FAILED run's failed payouts again.
    #[command(after_help = "Example:\n  payroll runs retry-failed run_01… --wait")]
    RetryFailed {
        run_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Archive a finished run.
    #[command(after_help = "Example:\n  payroll runs archive run_01…")]
    Archive { run_id: String },
    /// A run's payouts (with -f csv: every payout as CSV).
    #[command(after_help = "Example:\n  payroll runs payouts run_01… -f csv > payouts.csv")]
    Payouts {
        run_id: String,
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Debug, Subcommand)]
pub enum PayoutsCommand {
    /// Show a payout.
    #[command(after_help = "Example:\n  payroll payouts get pay_01…")]
    Get { payout_id: String },
    /// Retry a FAILED payout (its run must have finished).
    #[command(after_help = "Example:\n  payroll payouts retry pay_01…")]
    Retry { payout_id: String },
    /// Cancel a payout not yet handed to the exchange.
    #[command(after_help = "Example:\n  payroll payouts cancel pay_01…")]
    Cancel { payout_id: String },
    /// Resolve a stuck payout after checking the exchange: completed (it paid) or failed (no
    /// withdrawal exists there).
    #[command(
        after_help = "Examples:\n  payroll payouts resolve pay_01… --outcome completed --on-chain-tx-hash 0xabc… --note \"seen in the exchange's history\"\n  payroll payouts resolve pay_01… --outcome failed --note \"no withdrawal under this client id\""
    )]
    Resolve {
        payout_id: String,
        /// completed or failed.
        #[arg(long, value_parser = ["completed", "failed"])]
        outcome: String,
        /// With completed: the transaction hash.
        #[arg(long)]
        on_chain_tx_hash: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Show a job's progress (with --wait: until its run's payouts are terminal).
    #[command(after_help = "Example:\n  payroll jobs get job_01… --wait")]
    Get {
        job_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Debug, Args)]
pub struct EmployeeFields {
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub salary_usd_cents: Option<i64>,
    /// ETHEREUM, POLYGON, BASE, ARBITRUM, OPTIMISM, SOLANA
    #[arg(long)]
    pub network: Option<String>,
    #[arg(long)]
    pub wallet_address: Option<String>,
    /// FTE, CONTRACTOR, CONSULTANT
    #[arg(long)]
    pub employment_type: Option<String>,
    /// ACTIVE, INACTIVE
    #[arg(long)]
    pub status: Option<String>,
    #[arg(long)]
    pub contract_start_date: Option<String>,
    #[arg(long)]
    pub contract_end_date: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum EmployeesCommand {
    /// List employees, newest first.
    #[command(after_help = "Example:\n  payroll employees list --search ada")]
    List {
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        employment_type: Option<String>,
        #[arg(long)]
        search: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Show an employee.
    #[command(after_help = "Example:\n  payroll employees get emp_01…")]
    Get { employee_id: String },
    /// Create an employee.
    #[command(
        after_help = "Example:\n  payroll employees create --name Ada --email ada@example.com --salary-usd-cents 500000 --network BASE --wallet-address 0x…"
    )]
    Create {
        #[arg(long)]
        email: String,
        #[command(flatten)]
        fields: EmployeeFields,
    },
    /// Change an employee (any field but the email).
    #[command(
        after_help = "Example:\n  payroll employees update emp_01… --salary-usd-cents 550000"
    )]
    Update {
        employee_id: String,
        #[command(flatten)]
        fields: EmployeeFields,
    },
    /// Deactivate an employee.
    #[command(after_help = "Example:\n  payroll employees deactivate emp_01…")]
    Deactivate { employee_id: String },
    /// Import employees from a CSV file (header row of field names) or a JSON array.
    #[command(after_help = "Example:\n  payroll employees import staff.csv")]
    Import { file: PathBuf },
    /// Lift the hold on an employee's changed wallet (another key lineage than the one that
    /// changed it; check the change with the employee first).
    #[command(after_help = "Example:\n  payroll employees approve-wallet emp_01…")]
    ApproveWallet { employee_id: String },
}

#[derive(Debug, Subcommand)]
pub enum AgentSessionsCommand {
    /// List agent sessions (this key's own; every one with keys:manage).
    #[command(after_help = "Example:\n  payroll agent-sessions list")]
    List {
        #[command(flatten)]
        page: Page,
    },
    /// Show an agent session.
    #[command(after_help = "Example:\n  payroll agent-sessions get ses_01…")]
    Get { session_id: String },
    /// Create an agent session (its token is shown once).
    #[command(
        after_help = "Example:\n  payroll agent-sessions create --description \"March payroll agent\" \\\n    --scopes payroll:read,payroll:write,payroll:execute,treasury:read --expires-at 2026-03-02T18:00:00Z"
    )]
    Create {
        /// What the agent is for (1 to 200 characters).
        #[arg(long)]
        description: String,
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// At most agent_sessions.max_hours ahead (the default).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// Revoke an agent session at once.
    #[command(after_help = "Example:\n  payroll agent-sessions revoke ses_01…")]
    Revoke { session_id: String },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List approvals, newest first.
    #[command(after_help = "Example:\n  payroll approvals list --status PENDING")]
    List {
        /// PENDING, APPROVED, REJECTED, EXPIRED or FAILED.
        #[arg(long)]
        status: Option<String>,
        /// An operationId, e.g. executePayrollRun.
        #[arg(long)]
        operation: Option<String>,
        #[arg(long)]
        resource_id: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Show an approval: the request, who asked, and the decision and result once made.
    #[command(after_help = "Example:\n  payroll approvals get apr_01…")]
    Get { approval_id: String },
    /// Approve: the request is carried out now, as its requester.
    #[command(after_help = "Example:\n  payroll approvals approve apr_01…")]
    Approve { approval_id: String },
    /// Reject, with a reason: the request is never carried out.
    #[command(
        after_help = "Example:\n  payroll approvals reject apr_01… --reason \"not before the 28th\""
    )]
    Reject {
        approval_id: String,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TreasuryCommand {
    /// Exchange account and treasury wallet balances.
    #[command(after_help = "Example:\n  payroll treasury balance")]
    Balance,
    /// Move funds between the treasury wallet and the exchange account.
    #[command(after_help = "Example:\n  payroll treasury transfer --amount-usd-cents 500000")]
    Transfer {
        #[arg(long)]
        amount_usd_cents: i64,
        /// to_exchange (default) or to_treasury.
        #[arg(long)]
        direction: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
    /// Transfers, newest first.
    #[command(after_help = "Example:\n  payroll treasury transfers")]
    Transfers {
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List API keys.
    #[command(after_help = "Example:\n  payroll keys list")]
    List {
        #[command(flatten)]
        page: Page,
    },
    /// Show an API key.
    #[command(after_help = "Example:\n  payroll keys get key_01…")]
    Get { key_id: String },
    /// Create an API key (its plaintext is shown once).
    #[command(
        after_help = "Example:\n  payroll keys create --name agent --scopes payroll:read,payroll:write"
    )]
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// Rotate a key: a new key with the same scopes; the old one works through the grace period.
    #[command(after_help = "Example:\n  payroll keys rotate key_01…")]
    Rotate { key_id: String },
    /// Revoke a key at once.
    #[command(after_help = "Example:\n  payroll keys revoke key_01…")]
    Revoke { key_id: String },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// List audit entries, newest first.
    #[command(after_help = "Example:\n  payroll audit list --action PAYROLL_RUN_EXECUTED")]
    List {
        #[arg(long)]
        api_key_id: Option<String>,
        /// API_KEY, AGENT_SESSION, SYSTEM or ADMIN.
        #[arg(long)]
        actor_type: Option<String>,
        #[arg(long)]
        agent_session_id: Option<String>,
        /// Comma-separated actions.
        #[arg(long)]
        action: Option<String>,
        #[arg(long)]
        operation: Option<String>,
        #[arg(long)]
        resource_type: Option<String>,
        #[arg(long)]
        resource_id: Option<String>,
        #[arg(long)]
        after: Option<String>,
        #[arg(long)]
        before: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List emitted events, newest first.
    #[command(after_help = "Example:\n  payroll events list --type payout.completed")]
    List {
        /// An event kind (run.X is an alias of payroll.run.X).
        #[arg(long = "type")]
        event_type: Option<String>,
        #[arg(long)]
        created_after: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Register an endpoint; its signing secret is printed this once.
    #[command(
        after_help = "Examples:\n  payroll webhooks create --url https://hooks.example.com/payroll --events 'payroll.run.*,payout.failed'\n  payroll webhooks create --url https://hooks.example.com/all --events '*' --description \"ops channel\""
    )]
    Create {
        /// The https:// URL that receives the events.
        #[arg(long)]
        url: String,
        /// Event kinds, run.* aliases or wildcards (*, payroll.run.*, payout.*): a comma list
        /// or the flag repeated.
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        #[arg(long)]
        description: Option<String>,
    },
    /// List endpoints, newest first (no secrets).
    #[command(after_help = "Example:\n  payroll webhooks list --status DISABLED -f table")]
    List {
        /// ACTIVE or DISABLED.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Show an endpoint (no secret).
    #[command(after_help = "Example:\n  payroll webhooks get wh_01…")]
    Get { webhook_id: String },
    /// Delete an endpoint: no more deliveries, its pending ones fail.
    #[command(after_help = "Example:\n  payroll webhooks delete wh_01…")]
    Delete { webhook_id: String },
    /// Make a DISABLED endpoint ACTIVE again (failed deliveries stay FAILED).
    #[command(after_help = "Example:\n  payroll webhooks enable wh_01…")]
    Enable { webhook_id: String },
    /// A new signing secret, printed this once; the old one signs beside it for the grace
    /// period.
    #[command(after_help = "Example:\n  payroll webhooks rotate-secret wh_01…")]
    RotateSecret { webhook_id: String },
    /// Send a `webhook.test` event to this endpoint alone.
    #[command(after_help = "Example:\n  payroll webhooks test wh_01…")]
    Test { webhook_id: String },
    /// An endpoint's deliveries with every attempt, newest first.
    #[command(
        after_help = "Example:\n  payroll webhooks deliveries wh_01… --status FAILED --event-type payout.failed"
    )]
    Deliveries {
        webhook_id: String,
        /// PENDING, SUCCEEDED or FAILED.
        #[arg(long)]
        status: Option<String>,
        /// An event kind (run.X is an alias of payroll.run.X).
        #[arg(long)]
        event_type: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// Send a finished delivery once more, now.
    #[command(after_help = "Example:\n  payroll webhooks retry-delivery wh_01… whd_01…")]
    RetryDelivery {
        webhook_id: String,
        delivery_id: String,
    },
}
