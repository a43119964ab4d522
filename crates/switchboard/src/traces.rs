//! The trace exporter (`--otlp-endpoint`): an OTLP/HTTP (JSON) span exporter behind the SDK's
//! batch processor, installed as the global tracer provider the core's `trace` module uses.
//! Spans are exported in batches from the processor's own thread, so a slow or absent
//! collector never delays a request: a full queue drops spans (the SDK counts them).

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::ops_args::OpsArgs;

/// How long spans wait for their batch (short: operators look at traces while testing).
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// Spans waiting for export at most; more are dropped.
const QUEUE: usize = 8192;
/// One export's deadline.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The installed provider, flushed and shut down at exit.
pub(crate) struct TraceExport(SdkTracerProvider);

/// Installs the exporter when `--otlp-endpoint` is given.
pub(crate) fn install(ops: &OpsArgs) -> anyhow::Result<Option<TraceExport>> {
    let Some(endpoint) = &ops.otlp_endpoint else {
        return Ok(None);
    };
    let url = traces_url(endpoint)?;
    let name = ops.otlp_service_name.clone();
    // The blocking HTTP client must be built (and later dropped) off the async runtime.
    let provider = std::thread::spawn(move || build(url, name))
        .join()
        .map_err(|_| anyhow::anyhow!("the trace exporter could not be built"))??;
    opentelemetry::global::set_tracer_provider(provider.clone());
    let shown = switchboard_upstream::remote::shown_url(endpoint);
    tracing::info!(endpoint = %shown, "exporting traces (OTLP/HTTP)");
    Ok(Some(TraceExport(provider)))
}

impl TraceExport {
    /// Exports what is queued and stops (bounded by the export deadline).
    pub(crate) fn shutdown(self) {
        let provider = self.0;
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

fn build(url: String, service: String) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        // Its error quotes the URL as given, user info and query included.
        .map_err(|_| {
            anyhow::anyhow!("cannot build the OTLP exporter: --otlp-endpoint is not a URL it takes")
        })?;
    let batch = BatchConfigBuilder::default()
        .with_scheduled_delay(BATCH_DELAY)
        .with_max_queue_size(QUEUE)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build())
}

/// The collector's traces URL: `/v1/traces` under a base URL given without a path.
fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .with_context(|| {
            let shown = switchboard_upstream::remote::shown_url(endpoint);
            format!("--otlp-endpoint {shown:?}: not an http(s) URL")
        })?;
    Ok(match rest.find('/') {
        Some(i) if rest.len() > i + 1 => endpoint.to_owned(),
        _ => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
    })
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn a_base_url_gets_the_traces_path_and_a_full_one_is_kept() {
        let url = |e| traces_url(e).unwrap();
        assert_eq!(
            url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(url("https://c/otlp/v1/traces"), "https://c/otlp/v1/traces");
        assert!(traces_url("127.0.0.1:4318").is_err());
    }
}
