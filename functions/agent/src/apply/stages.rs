//! The apply's stages after the lock and the state, each taking the value the one before
//! returned: fetch (download → verify → compare) → prepare (addresses → maps) → [check, keep]
//! → install → activate (the runtime update, or swap → reload → running).

use std::path::PathBuf;

use autoproxy::artifact::MapFiles;

use super::maps::Staged;
use super::{Failure, Run, Stage, fail, files, log};

/// The new config, verified: its text and what the apply needs of it.
#[derive(Debug, Clone)]
pub(super) struct NewConfig {
    pub text: String,
    pub generation: u64,
    pub socket: PathBuf,
    /// Where its maps go.
    pub maps: MapFiles,
}

/// What the stages before the check wrote: the maps staged beside the live ones, and the
/// config beside the installed one.
#[derive(Debug)]
pub(super) struct Prepared {
    pub maps: Staged,
    pub config: PathBuf,
}

/// Which way the new generation goes to HAProxy.
#[derive(Debug)]
pub(super) enum Activation {
    /// Only the route tables changed: over the runtime API, no reload.
    Runtime,
    /// Why it reloads.
    Reload(String),
}

impl Run {
    /// download → verify → compare: the new config, or `None` when it is not newer than what
    /// runs (skipped).
    pub(super) async fn fetch(&mut self) -> Result<Option<NewConfig>, Failure> {
        self.pause("download").await;
        let (text, version) = self.download().await?;
        self.verdict.version_applied.clone_from(&version);
        self.step = "verify";
        let new = self.verify(text, &version)?;
        self.verdict.generation = new.generation;
        Ok((!self.skips(new.generation)).then_some(new))
    }

    /// addresses → maps: the new hosts' addresses asked for, the route tables staged as they
    /// may serve, and the config written beside the live one.
    pub(super) async fn prepare(&mut self, new: &NewConfig) -> Result<Prepared, Failure> {
        self.step = "maps";
        self.seed_address_map(&new.maps).await?;
        self.step = "addresses";
        self.ensure_addresses(&new.text).await;
        self.step = "maps";
        let maps = self.stage_maps(&new.text, new.generation, &new.maps)?;
        let config = files::temp_path(&self.paths.dir, ".autoproxy-new");
        self.undo.temps.push(config.clone());
        files::write_synced(&config, new.text.as_bytes(), 0o644)
            .or_else(|err| fail(format!("cannot write {}: {err}", config.display())))?;
        Ok(Prepared { maps, config })
    }

    /// install: which way the generation goes to HAProxy, decided from what ran before
    /// anything is installed; then the route maps renamed into place.
    pub(super) fn install(
        &mut self,
        new: &NewConfig,
        prepared: &Prepared,
    ) -> Result<Activation, Failure> {
        let activation = match self.needs_reload(&new.text, &new.maps) {
            Some(why) => Activation::Reload(why),
            None => Activation::Runtime,
        };
        self.step = "install";
        self.install_maps(&prepared.maps)?;
        Ok(activation)
    }

    /// activate: the runtime update (no reload), or, when the structure changed or HAProxy
    /// does not take the update, swap → reload → running. Either way the config is swapped in.
    pub(super) async fn activate(
        &mut self,
        new: &NewConfig,
        prepared: &Prepared,
        activation: Activation,
    ) -> Result<(), Failure> {
        let why = match activation {
            Activation::Reload(why) => why,
            Activation::Runtime => {
                self.step = "update";
                // From the first command on, HAProxy may hold new routes: a failure rolls back.
                self.undo.stage = Stage::Installed;
                match self.update_runtime(new, &prepared.maps).await {
                    Ok(()) => {
                        log(
                            "update",
                            &format!(
                                "the running HAProxy holds the new route tables and generation {}: no reload",
                                new.generation
                            ),
                        );
                        self.taken("runtime", "only the route tables changed");
                        self.swap_in(new, prepared)?;
                        return self.done(new.generation, "without a reload");
                    }
                    Err(err) => format!("the running HAProxy did not take the new routes ({err})"),
                }
            }
        };
        self.taken("reload", &why);
        self.swap_in(new, prepared)?;
        self.pause("swap").await;
        self.reload_and_wait(new).await?;
        self.done(new.generation, "after a reload")
    }

    /// swap: the generation map, then the config, renamed into place.
    fn swap_in(&mut self, new: &NewConfig, prepared: &Prepared) -> Result<(), Failure> {
        self.step = "swap";
        self.install_generation_map(&prepared.maps)?;
        self.swap(&prepared.config, new.generation)
    }
}
