//! `loadgen saturate`: the saturation search run here, one probe after the other.

use tokio_util::sync::CancellationToken;

use super::run::{spawn_signal_handler, stopped_within_bound};
use super::{Cli, CliError};
use crate::output;
use crate::spec::WorkloadSpec;
use crate::summary::Summary;

/// Runs a saturation search locally, one probe after the other, printing each as it ends.
pub(super) async fn saturate(
    cli: &Cli,
    base: WorkloadSpec,
    settings: crate::saturation::SearchSettings,
) -> Result<(), CliError> {
    use crate::saturation::{Search, probe_spec};
    settings
        .validate("")
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let cancel = CancellationToken::new();
    spawn_signal_handler(cancel.clone());
    let mut search = Search::new(settings.clone());
    if !cli.output.json {
        println!(
            "saturation search against {}: {} publishers -> {} subscribers ({}), QoS {}, {} B; probes of {} after {} warm-up, p99 bound {}, budget {}",
            base.broker,
            base.publishers,
            base.subscribers,
            base.topology,
            base.qos.level(),
            base.payload.bytes(),
            humantime::format_duration(settings.probe),
            humantime::format_duration(settings.probe_warmup),
            humantime::format_duration(settings.p99_bound),
            humantime::format_duration(settings.budget),
        );
    }
    while let Some(probe) = search.next_probe() {
        if cancel.is_cancelled() {
            break;
        }
        let spec = probe_spec(&base, probe, &settings);
        let began = std::time::Instant::now();
        let probe_run = crate::runtime::run_dedicated(
            spec,
            crate::engine::StartBarrier::default(),
            cancel.clone(),
            None,
        );
        let outcome = match stopped_within_bound(probe_run, &cancel).await? {
            Ok(result) => crate::saturation::ProbeOutcome::of(
                probe,
                &Summary::of(&result),
                &settings,
                began.elapsed(),
            ),
            Err(error) => {
                crate::saturation::ProbeOutcome::failed(probe, error.to_string(), began.elapsed())
            }
        };
        if !cli.output.json {
            println!("{}", output::probe_line(&outcome));
        }
        search.record(outcome);
    }
    let report = search.report();
    if cli.output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .map_err(|e| output::OutputError::Serialize(e.to_string()))?
        );
    } else {
        print!("{}", output::saturation_summary(&report));
    }
    Ok(())
}
