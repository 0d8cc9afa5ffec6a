//! The `Controller` gRPC service: role checks, admission of plans against the service's own
//! configuration, ownership of runs, then the run registry, whose Rust state becomes
//! messages here (through `convert.rs`) and nowhere earlier.

use std::sync::Arc;

use proto::controller::v1 as pb;
use proto::controller::v1::controller_server::Controller;
use proto::pki::Role;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::config::ServeConfig;
use super::files;
use super::runs::{CANCEL_WAIT, Refused, Runs, UnknownRun};
use crate::plan::Plan;

/// Roles that may drive the controller: itself and remote clients (the laptop).
pub(crate) const ALLOWED: [Role; 2] = [Role::Controller, Role::Client];

/// Longest plan name (the caller's file name) accepted in Submit.
const MAX_NAME: usize = 256;

/// The service: a handle on the run registry.
#[derive(Debug)]
pub(crate) struct ControllerService {
    runs: Arc<Runs>,
    config: Arc<ServeConfig>,
}

impl ControllerService {
    /// The service at `serve`'s start, which warns of certificates in its PKI folder that end
    /// soon (as `controller pki` words it).
    pub(crate) fn new(runs: Arc<Runs>, config: Arc<ServeConfig>) -> Self {
        crate::pki_command::warn_expiring(&config.pki_dir);
        ControllerService { runs, config }
    }
}

/// The caller's identity if its role is `ALLOWED`; a caller whose certificate ends soon is
/// warned about in the service's log, where the operator who renews it looks.
fn caller<T>(request: &Request<T>) -> Result<proto::pki::PeerIdentity, Status> {
    let caller = proto::mtls::require_role(request, &ALLOWED)?;
    // Once per caller and process: a watch polls, and a warning per call would bury the log.
    if let Some(expiring) = proto::mtls::peer_expiry(
        request,
        proto::pki::EXPIRY_WARNING,
        std::time::SystemTime::now(),
    ) {
        proto::mtls::warn_once(&expiring, "caller");
    }
    Ok(caller)
}

impl From<UnknownRun> for Status {
    fn from(error: UnknownRun) -> Self {
        Status::not_found(error.to_string())
    }
}

impl From<Refused> for Status {
    fn from(error: Refused) -> Self {
        match error {
            Refused::ShuttingDown => Status::unavailable(error.to_string()),
            Refused::TooMany(_) => Status::resource_exhausted(error.to_string()),
            Refused::NoRunId(_) => Status::internal(error.to_string()),
        }
    }
}

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::RunId>, Status> {
        let caller = caller(&request)?;
        let pb::SubmitRequest { plan: text, name } = request.into_inner();
        if name.len() > MAX_NAME || name.chars().any(char::is_control) {
            return Err(Status::invalid_argument(format!(
                "name: at most {MAX_NAME} printable characters"
            )));
        }
        let origin = if name.is_empty() { "plan" } else { &name };
        let plan =
            Plan::parse(&text, origin).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let plan = self
            .config
            .admit(plan, &text)
            .map_err(|reason| Status::invalid_argument(format!("{origin}: {reason}")))?;
        let plan_name = plan.name.clone();
        let id = self
            .runs
            .submit(plan, text, caller.clone(), &self.config.results_dir)?;
        tracing::info!(%caller, run = %id, plan = %plan_name, "plan queued");
        Ok(Response::new(pb::RunId { id }))
    }

    type WatchStream = ReceiverStream<Result<pb::RunEvent, Status>>;

    async fn watch(
        &self,
        request: Request<pb::RunId>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.runs.authorize(&id, &caller)?;
        let mut version = self.runs.subscribe(&id)?;
        let runs = Arc::clone(&self.runs);
        let (out, stream) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut next = 0;
            loop {
                // Mark the version seen before reading, so a change after the read wakes us.
                version.borrow_and_update();
                let Ok(followed) = runs.follow(&id, next) else {
                    return;
                };
                next += followed.updates.len();
                for update in followed.updates {
                    if out.send(Ok(pb::RunEvent::from(update))).await.is_err() {
                        return;
                    }
                }
                if followed.over {
                    return;
                }
                tokio::select! {
                    changed = version.changed() => if changed.is_err() { return },
                    _ = out.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListReply>, Status> {
        let caller = caller(&request)?;
        Ok(Response::new(pb::ListReply {
            runs: self
                .runs
                .list(&caller)
                .iter()
                .map(pb::RunInfo::from)
                .collect(),
        }))
    }

    type FetchStream = ReceiverStream<Result<pb::FileChunk, Status>>;

    async fn fetch(
        &self,
        request: Request<pb::RunId>,
    ) -> Result<Response<Self::FetchStream>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.runs.authorize(&id, &caller)?;
        let dir = self.runs.results_dir(&id)?.ok_or_else(|| {
            Status::failed_precondition(format!("run {id} has no results folder yet (queued)"))
        })?;
        tracing::info!(%caller, run = %id, dir = %dir.display(), "fetch");
        let (out, stream) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || files::send_folder(&dir, &out));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn cancel(&self, request: Request<pb::RunId>) -> Result<Response<pb::RunInfo>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.runs.authorize(&id, &caller)?;
        tracing::info!(%caller, run = %id, "cancel");
        let reason = format!("cancelled by {caller}");
        let info = self.runs.cancel(&id, &reason, CANCEL_WAIT).await?;
        Ok(Response::new(pb::RunInfo::from(&info)))
    }
}
