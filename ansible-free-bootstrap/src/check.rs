//! After install: every agent must answer Info over mTLS with the controller identity
//! bootstrap made, and say the name it was installed as. Then the table of nodes.

use std::time::{Duration, Instant};

use proto::agent::v1 as pb;
use proto::mtls::Credentials;

use crate::install::{NodeChange, NodeOutcome};
use crate::state::{CONTROLLER_NAME, State};

/// How long an agent may take to answer after it was (re)started.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// One agent's answer, or why there was none.
pub type Answer = Result<pb::NodeInfo, String>;

/// Asks every installed agent for Info (concurrently, each within [`ANSWER_DEADLINE`]).
pub async fn check_agents(state: &State, outcomes: &[NodeOutcome]) -> Vec<Answer> {
    let credentials = match Credentials::load(&state.pki_dir(), CONTROLLER_NAME) {
        Ok(credentials) => credentials,
        Err(error) => {
            let message = format!(
                "controller identity in {}: {error}",
                state.pki_dir().display()
            );
            return outcomes.iter().map(|_| Err(message.clone())).collect();
        }
    };
    let asks = outcomes.iter().map(|outcome| {
        let credentials = credentials.clone();
        async move {
            if let NodeChange::Failed(_) = outcome.change {
                return Err("not checked: its install failed".to_string());
            }
            ask(
                &outcome.node.agent.to_string(),
                &outcome.node.name,
                &credentials,
            )
            .await
        }
    });
    futures_util::future::join_all(asks).await
}

async fn ask(address: &str, name: &str, credentials: &Credentials) -> Answer {
    let started = Instant::now();
    let mut last = String::new();
    while let Some(left) = ANSWER_DEADLINE.checked_sub(started.elapsed()) {
        let attempt = async {
            let mut client = proto::client::connect_agent(address, None, credentials)
                .await
                .map_err(|error| proto::client::error_chain(&error))?;
            client
                .info(pb::InfoRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| proto::client::status_text(&status))
        };
        // A TLS handshake or a call that hangs counts against the same deadline.
        match tokio::time::timeout(left, attempt).await {
            Ok(Ok(info)) if info.name == name => return Ok(info),
            Ok(Ok(info)) => {
                return Err(format!("the agent at {address} says it is {:?}", info.name));
            }
            Ok(Err(error)) => last = error,
            Err(_) => last = "no answer (timed out)".to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!(
        "no answer over mTLS from {address} within {ANSWER_DEADLINE:?}: {last}"
    ))
}

/// The table printed at the end of an install.
pub fn table(outcomes: &[NodeOutcome], answers: &[Answer]) -> String {
    let mut rows = vec![[
        "node".to_string(),
        "role".into(),
        "arch".into(),
        "agent".into(),
        "change".into(),
        "answers over mTLS".into(),
    ]];
    for (outcome, answer) in outcomes.iter().zip(answers) {
        let change = match &outcome.change {
            NodeChange::Unchanged => "unchanged".to_string(),
            NodeChange::Changed { files, started } => {
                format!("{} file(s) written, {started}", files.len())
            }
            NodeChange::Failed(error) => format!("FAILED, partially installed: {error}"),
        };
        let answer = match answer {
            Ok(info) => format!(
                "yes: agent {} on {} ({})",
                info.agent_version, info.hostname, info.kernel
            ),
            Err(error) => format!("NO: {error}"),
        };
        rows.push([
            outcome.node.name.clone(),
            outcome.node.kind.as_str().into(),
            outcome.node.arch.clone(),
            outcome.node.agent.to_string(),
            change,
            answer,
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|row| row[i].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}
