//! Which node a data directory belongs to: `cluster/node.json`, written at the node's first
//! start and checked at every later one.
//!
//! A node's id is also its replica id in the metadata group and in every partition group it
//! holds a replica of, and Raft's votes and logs on disk are kept under that id. A data
//! directory started again under another `cluster.node_id` (a copied volume, a mixed-up
//! config) would vote twice in one term as two nodes, which breaks the one guarantee Raft
//! gives. So the first start records the id beside the data, and a start with another id is
//! refused before any group opens.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, ServerError};

/// The file's name inside the node's `cluster/` directory.
pub const FILE: &str = "node.json";

/// What `node.json` holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Identity {
    node_id: u64,
}

/// Records `node_id` as the owner of `dir` on first use, or checks that it owns it. A
/// directory that holds cluster data from before `node.json` existed is claimed as it is.
pub fn claim(dir: &Path, node_id: u64) -> Result<()> {
    let path = dir.join(FILE);
    match fs_err::read(&path) {
        Ok(bytes) => {
            let recorded: Identity = serde_json::from_slice(&bytes).map_err(|e| {
                ServerError::Internal(format!("{} does not parse: {e}", path.display()))
            })?;
            if recorded.node_id == node_id {
                Ok(())
            } else {
                Err(ServerError::InvalidRequest(format!(
                    "this data directory belongs to node {} ({}), but cluster.node_id is \
                     {node_id}: start it as node {}, or start node {node_id} with an empty \
                     data directory (it then joins and receives its replicas)",
                    recorded.node_id,
                    path.display(),
                    recorded.node_id
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write(dir, node_id),
        Err(e) => Err(ServerError::Internal(e.to_string())),
    }
}

/// Writes `node.json` whole or not at all (a temporary file, synced, renamed, the directory
/// synced), so a crash during the first start cannot leave a half-written identity.
fn write(dir: &Path, node_id: u64) -> Result<()> {
    let io = |e: std::io::Error| ServerError::Internal(e.to_string());
    fs_err::create_dir_all(dir).map_err(io)?;
    let body = serde_json::to_vec_pretty(&Identity { node_id })
        .map_err(|e| ServerError::Internal(e.to_string()))?;
    let temporary = dir.join(format!("{FILE}.tmp"));
    let mut file = fs_err::File::create(&temporary).map_err(io)?;
    std::io::Write::write_all(&mut file, &body).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs_err::rename(&temporary, dir.join(FILE)).map_err(io)?;
    fs_err::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    tracing::info!(
        node = node_id,
        "this data directory now belongs to this node"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_start_claims_the_directory_and_later_ones_must_match() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = dir.path().join("cluster");
        claim(&cluster, 3).unwrap();
        claim(&cluster, 3).unwrap();
        let refused = claim(&cluster, 4).unwrap_err().to_string();
        assert!(
            refused.contains("belongs to node 3") && refused.contains("cluster.node_id is 4"),
            "{refused}"
        );
        assert!(!cluster.join(format!("{FILE}.tmp")).is_file());
    }

    #[test]
    fn a_damaged_identity_is_an_error_not_a_new_claim() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::write(dir.path().join(FILE), b"{\"node_id\": ").unwrap();
        let refused = claim(dir.path(), 1).unwrap_err().to_string();
        assert!(refused.contains("does not parse"), "{refused}");
    }
}
