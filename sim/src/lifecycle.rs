//! Batch endings shared by the RPCs and the periodic tasks: abort, retire,
//! lease expiry, and the deletion of files no live batch needs.

use rusqlite::{params, Connection};

use crate::ctx::Ctx;
use crate::files;
use crate::project_db::{self, secs, Batch, Res, WU_ERROR_CANCELLED};

/// `abort_batch`: every job cancelled (unsent instances dropped), state
/// aborted, completion time now.
pub fn abort_batch(c: &Connection, b: &Batch, now: f64) -> Res<()> {
    c.prepare_cached("UPDATE result SET server_state = 5, outcome = 5 WHERE batch = ?1 AND server_state = 2")?.execute([b.id])?;
    c.prepare_cached(
        "UPDATE workunit SET error_mask = error_mask | ?1, mod_time = ?2, transition_time = ?3 \
         WHERE batch = ?4 AND (error_mask & ?1) = 0",
    )?
    .execute(params![WU_ERROR_CANCELLED, secs(now), now, b.id])?;
    c.prepare_cached("UPDATE batch SET state = ?1, completion_time = ?2 WHERE id = ?3")?.execute(params![
        project_db::BATCH_ABORTED,
        secs(now),
        b.id
    ])?;
    Ok(())
}

/// `retire_batch`: statistics recomputed, the jobs that never had an
/// instance in progress or over are cancelled (unless the batch is still
/// in init state), state retired. Its files go at the next cleanup.
pub fn retire_batch(c: &Connection, b: Batch, now: f64) -> Res<()> {
    let b = project_db::recompute_batch(c, b, now)?;
    if b.state != project_db::BATCH_INIT {
        const NEVER_RAN: &str = "canonical_resultid = 0 AND error_mask = 0 AND NOT EXISTS \
            (SELECT 1 FROM result r WHERE r.workunitid = w.id AND r.server_state IN (4, 5))";
        c.prepare_cached(&format!(
            "UPDATE result SET server_state = 5, outcome = 5 WHERE batch = ?1 AND server_state = 2 \
             AND workunitid IN (SELECT id FROM workunit w WHERE w.batch = ?1 AND {NEVER_RAN})"
        ))?
        .execute([b.id])?;
        c.prepare_cached(&format!(
            "UPDATE workunit AS w SET error_mask = error_mask | ?1, mod_time = ?2, transition_time = ?3 \
             WHERE batch = ?4 AND {NEVER_RAN}"
        ))?
        .execute(params![WU_ERROR_CANCELLED, secs(now), now, b.id])?;
    }
    c.prepare_cached("UPDATE batch SET state = ?1, files_pending = 1 WHERE id = ?2")?.execute(params![project_db::BATCH_RETIRED, b.id])?;
    Ok(())
}

/// The lease task: every batch with `0 < expire_time < now` that is not
/// retired yet is aborted, then retired. Returns how many.
pub fn expire_batches(c: &Connection, now: f64) -> Res<usize> {
    let ids: Vec<i64> = c
        .prepare_cached("SELECT id FROM batch WHERE expire_time > 0 AND expire_time < ?1 AND state != ?2")?
        .query_map(params![now, project_db::BATCH_RETIRED], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in &ids {
        if let Some(b) = project_db::batch_by_id(c, *id)? {
            tracing::info!(batch = b.id, name = %b.name, "batch expired: aborting and retiring");
            abort_batch(c, &b, now)?;
            if let Some(b) = project_db::batch_by_id(c, *id)? {
                retire_batch(c, b, now)?;
            }
        }
    }
    Ok(ids.len())
}

/// Deletes the outputs of retired batches, and the input files that are
/// tied to no live batch (all their batches aborted, retired or gone; or
/// none at all and their `delete_time` passed).
pub fn collect_garbage(ctx: &Ctx, c: &Connection, now: f64) -> Res<()> {
    let pending: Vec<i64> =
        c.prepare_cached("SELECT id FROM batch WHERE files_pending = 1")?.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    for id in pending {
        for x in project_db::results_of_batch(c, id)? {
            for f in x.output_files.iter().filter(|f| !f.is_empty()) {
                files::remove(&ctx.dirs.upload.join(f));
            }
        }
        c.prepare_cached("UPDATE batch SET files_pending = 0 WHERE id = ?1")?.execute([id])?;
    }
    let dead: Vec<(i64, String)> = c
        .prepare_cached(
            "SELECT j.id, j.name FROM job_file j WHERE NOT EXISTS \
               (SELECT 1 FROM batch_file_assoc a JOIN batch b ON b.id = a.batch_id \
                WHERE a.job_file_id = j.id AND b.state < ?1) \
             AND (EXISTS (SELECT 1 FROM batch_file_assoc a WHERE a.job_file_id = j.id) \
                  OR (j.delete_time > 0 AND j.delete_time < ?2))",
        )?
        .query_map(params![project_db::BATCH_ABORTED, now], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, name) in dead {
        tracing::info!(file = %name, "deleting input file no live batch needs");
        files::remove(&ctx.dirs.download.join(&name));
        project_db::delete_job_file(c, id)?;
    }
    Ok(())
}
