//! Start-up and shutdown, shared by every role: the HTTP API over the catalog, data in
//! `node.data_dir`.
//!
//! Start-up order matters for readiness: the listener binds first (so `/healthz` answers and
//! `/readyz` says 503), collections load on a blocking thread, then readiness turns green and
//! the ready file (if configured) is written with the bound address.

use std::sync::Arc;

use anyhow::Context;

use super::Wiring;
use crate::catalog::{AliasBook, Catalog};
use crate::config::Config;
use crate::http::{router, AppState};
use crate::node::Node;

/// Runs until SIGINT or SIGTERM, then drains requests and snapshots every collection.
pub async fn serve(config: Config, wiring: Wiring) -> anyhow::Result<()> {
    let Wiring {
        host,
        trainers,
        node,
        node_host,
        peer_client,
        faults,
    } = wiring;
    let listener = tokio::net::TcpListener::bind(config.http_addr())
        .await
        .with_context(|| format!("cannot listen on {}", config.http.addr))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %config.node.data_dir.display(), role = config.cluster.role.name(), "cairn listening");

    let admission = crate::http::admission::Admission::new(
        config.http.max_requests_in_flight,
        config.http.max_queued_requests,
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let searchers = crate::http::searchers::Searchers::start(
        match config.http.search_threads {
            0 => cores,
            n => n,
        },
        config.http.search_nice,
        config.http.search_queue_per_thread,
    )?;
    let mut state = AppState::new(
        config.limits,
        config.http.max_body_bytes,
        admission,
        searchers.clone(),
    );
    state.node = node.clone();
    state.api_keys = crate::http::auth::ApiKeys::from_config(&config.http);
    state.key_rates = crate::http::key_rates::KeyRates::new(config.http.rate_limit_per_key);
    if state.api_keys.is_some() {
        tracing::info!("API keys are required on every route but /healthz and /readyz");
    }
    let state = Arc::new(state);
    let app = router(state.clone());
    let loaded: crate::http::peer::CatalogCell = Arc::default();
    let internal = match &node {
        Some(node) => {
            let internal =
                serve_internal(&config, node, loaded.clone(), faults, searchers.clone()).await?;
            let api_uri = match config.cluster.api_url.as_str() {
                "" => format!("http://{addr}"),
                url => url.trim_end_matches('/').to_owned(),
            };
            if let (false, Some(peers)) = (config.cluster.join.is_empty(), &peer_client) {
                crate::http::peer::spawn_join(
                    peers.clone(),
                    node.clone(),
                    config.cluster.join.clone(),
                    api_uri.clone(),
                );
            }
            node.register(api_uri);
            crate::node::members::spawn(node.clone());
            if let Some(peers) = &peer_client {
                let dead_after = std::time::Duration::from_secs(config.cluster.dead_after_secs);
                crate::node::rebalance::spawn(node.clone(), peers.clone(), dead_after);
            }
            Some(internal)
        }
        None => None,
    };
    let tls = match (
        config.http.tls_cert_file.as_str(),
        config.http.tls_key_file.as_str(),
    ) {
        ("", "") => None,
        (cert, key) => Some(crate::http::tls::server_config(
            std::path::Path::new(cert),
            std::path::Path::new(key),
        )?),
    };
    let server = match tls {
        None => tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown_signal())
                .await
        }),
        Some(tls) => {
            tracing::info!(%addr, "the API speaks HTTPS only");
            let listener = crate::http::tls::TlsListener::new(listener, tls)?;
            tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown_signal())
                    .await
            })
        }
    };

    let data_dir = config.node.data_dir.clone();
    let snapshots_dir = config.node.snapshots();
    // A node's aliases are the cluster's, in its metadata; a standalone server's, in a file.
    let book = node
        .clone()
        .map(|node| Arc::new(super::sync::ClusterAliases(node)) as Arc<dyn AliasBook>);
    let catalog = tokio::task::spawn_blocking(move || {
        Catalog::open(
            &data_dir,
            &snapshots_dir,
            config.limits,
            trainers,
            host,
            book,
        )
    })
    .await?
    .context("cannot load collections")?;
    let catalog = Arc::new(catalog);
    let _ = loaded.set(catalog.clone());
    if let (Some(node), Some(host), Some(peers)) = (&node, &node_host, &peer_client) {
        super::sync::spawn(node.clone(), host.clone(), peers.clone(), catalog.clone());
    }
    state.set_ready(catalog.clone());
    tracing::info!(collections = catalog.names().len(), "ready");
    if !config.http.ready_file.is_empty() {
        write_ready_file(&config.http.ready_file, &addr.to_string())?;
    }

    server.await?.context("http server failed")?;
    if let Some(node) = &node {
        // Stop the groups before the internal API: a group's last messages go out, and no
        // peer's message reaches a group half stopped.
        node.shutdown().await;
    }
    if let Some(internal) = internal {
        internal.abort();
    }
    tracing::info!("shutting down: writing index snapshots");
    // Closing writes snapshots and joins appliers: blocking work, off the async workers.
    tokio::task::spawn_blocking(move || {
        catalog.close_all();
        drop(catalog);
        drop(state);
    })
    .await?;
    tracing::info!("stopped");
    Ok(())
}

/// Starts a node's internal API on `cluster.internal_addr` (see `http::peer`).
async fn serve_internal(
    config: &Config,
    node: &Arc<Node>,
    catalog: crate::http::peer::CatalogCell,
    faults: Arc<crate::http::peer::Faults>,
    searchers: crate::http::searchers::Searchers,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(&config.cluster.internal_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.cluster.internal_addr))?;
    let app = crate::http::peer::router(
        node.clone(),
        catalog,
        config.cluster.secret.expose(),
        faults,
        searchers,
    );
    let cluster = &config.cluster;
    if !cluster.internal_tls() {
        tracing::info!(addr = %listener.local_addr()?, "internal API listening");
        return Ok(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "internal API failed");
            }
        }));
    }
    let tls = crate::http::tls::server_config(
        cluster.internal_tls_cert_file.as_ref(),
        cluster.internal_tls_key_file.as_ref(),
    )?;
    tracing::info!(addr = %listener.local_addr()?, "internal API listening, HTTPS only");
    let listener = crate::http::tls::TlsListener::new(listener, tls)?;
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "internal API failed");
        }
    }))
}

/// Writes atomically so a watcher never reads a half-written address.
fn write_ready_file(path: &str, contents: &str) -> anyhow::Result<()> {
    let tmp = format!("{path}.tmp");
    fs_err::write(&tmp, contents)?;
    fs_err::rename(&tmp, path)?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received");
}
