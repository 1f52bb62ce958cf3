//! Test controls outside the BOINC paths, under `<project_url>__sim/`:
//! the state as JSON, the fault plan, users, the clock. See docs/sim.md.

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use rusqlite::Connection;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::ctx::Ctx;
use crate::faults::FaultPlan;
use crate::project_db::{self, Res};
use crate::rpc::{job_status, submit_rpc::instance_state_text};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/__sim")
            .route("/state", web::get().to(state))
            .route("/faults", web::get().to(get_faults))
            .route("/faults", web::put().to(set_faults))
            .route("/faults", web::post().to(set_faults))
            .route("/users", web::post().to(add_user))
            .route("/clock", web::get().to(get_clock))
            .route("/clock", web::post().to(advance_clock))
            .route("/hosts", web::get().to(get_hosts))
            .route("/hosts", web::post().to(set_host))
            .route("/web", web::get().to(get_web))
            .route("/web", web::post().to(set_web))
            .route("/batch_zip", web::post().to(set_batch_zip)),
    );
}

fn bad_request(msg: impl std::fmt::Display) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({ "error": msg.to_string() }))
}

async fn with_db<T, F>(ctx: Arc<Ctx>, f: F) -> Result<T, HttpResponse>
where
    T: Send + 'static,
    F: FnOnce(&Ctx, &Connection) -> Res<T> + Send + 'static,
{
    match web::block(move || {
        let c = ctx.store.lock();
        f(&ctx, &c)
    })
    .await
    {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(HttpResponse::InternalServerError().json(json!({ "error": e.to_string() }))),
        Err(e) => Err(HttpResponse::InternalServerError().json(json!({ "error": e.to_string() }))),
    }
}

/// `GET __sim/state[?batch=ID][&jobs=0]`.
async fn state(req: HttpRequest, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let q: HashMap<String, String> = form_urlencoded::parse(req.query_string().as_bytes()).into_owned().collect();
    let only_batch: Option<i64> = q.get("batch").and_then(|v| v.parse().ok());
    let with_jobs = q.get("jobs").map(|v| v != "0" && v != "false").unwrap_or(true);
    let counts = ctx.counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let injected = ctx.faults.injected();
    let held = ctx.faults.held_bodies();
    let res = with_db(ctx.clone(), move |ctx, c| build_state(ctx, c, only_batch, with_jobs)).await;
    match res {
        Ok(mut v) => {
            v["rpc_counts"] = json!(counts);
            v["faults_injected"] = json!(injected);
            v["fault_bodies_held"] = json!(held);
            HttpResponse::Ok().json(v)
        }
        Err(r) => r,
    }
}

fn build_state(ctx: &Ctx, c: &Connection, only_batch: Option<i64>, with_jobs: bool) -> Res<Value> {
    let batches: Vec<project_db::Batch> =
        project_db::all_batches(c)?.into_iter().filter(|b| only_batch.is_none() || only_batch == Some(b.id)).collect();
    let mut jb = Vec::new();
    let mut jobs = Vec::new();
    for b in &batches {
        jb.push(json!({
            "id": b.id,
            "name": b.name,
            "user_id": b.user_id,
            "app": ctx.app_name(b.app_id),
            "state": b.state,
            "njobs": b.njobs,
            "create_time": b.create_time,
            "expire_time": b.expire_time,
        }));
        if !with_jobs {
            continue;
        }
        let mut by_wu: HashMap<i64, Vec<Value>> = HashMap::new();
        for x in project_db::results_of_batch(c, b.id)? {
            by_wu.entry(x.workunitid).or_default().push(json!({
                "id": x.id,
                "name": x.name,
                "server_state": x.server_state,
                "outcome": x.outcome,
                "validate_state": x.validate_state,
                "state": instance_state_text(&x),
                "host": x.host_name,
                "sent_time": x.sent_time,
                "report_deadline": x.report_deadline,
                "exit_status": x.exit_status,
                "elapsed_time": x.elapsed_time,
                "cpu_time": x.cpu_time,
                "output_files": x.output_files,
                "batch": x.batch,
                "host_id": x.host_id,
                "received_time": x.received_time,
                "granted_credit": x.granted_credit,
            }));
        }
        for wu in project_db::wus_of_batch(c, b.id)? {
            let target = project_db::wu_target(c, wu.id)?.map(|(kind, id)| {
                let kind = if kind == crate::rpc::submit_rpc::ASSIGN_HOST { "host" } else { "user" };
                json!({ "type": kind, "id": id })
            });
            jobs.push(json!({
                "target": target,
                "id": wu.id,
                "name": wu.name,
                "batch": wu.batch,
                "app": ctx.app_name(wu.appid),
                "status": job_status(wu.canonical_resultid, wu.error_mask, wu.ever_sent),
                "error_mask": wu.error_mask,
                "canonical_resultid": wu.canonical_resultid,
                "mod_time": wu.mod_time,
                "transition_time": wu.transition_time,
                "command_line": wu.command_line,
                "rsc_fpops_est": wu.rsc_fpops_est,
                "rsc_fpops_bound": wu.rsc_fpops_bound,
                "rsc_memory_bound": wu.rsc_memory_bound,
                "rsc_disk_bound": wu.rsc_disk_bound,
                "input_files": wu.input_files,
                "instances": by_wu.remove(&wu.id).unwrap_or_default(),
            }));
        }
    }
    let mut files = Vec::new();
    let mut known = std::collections::HashSet::new();
    for jf in project_db::all_job_files(c)? {
        let size = std::fs::metadata(ctx.dirs.download.join(&jf.name)).map(|m| m.len() as i64).unwrap_or(-1);
        known.insert(jf.name.clone());
        files.push(json!({
            "name": jf.name,
            "size": size,
            "batches": project_db::assoc_batches(c, jf.id)?,
            "record": true,
            "create_time": jf.create_time,
            "delete_time": jf.delete_time,
        }));
    }
    // Files in the store without a job_file record (e.g. inline inputs).
    if let Ok(rd) = std::fs::read_dir(&ctx.dirs.download) {
        let mut extra: Vec<(String, u64)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let m = e.metadata().ok()?;
                (m.is_file() && !known.contains(&name)).then_some((name, m.len()))
            })
            .collect();
        extra.sort();
        for (name, size) in extra {
            files.push(json!({ "name": name, "size": size, "batches": [], "record": false }));
        }
    }
    let outputs = std::fs::read_dir(&ctx.dirs.upload).map(|rd| rd.flatten().count()).unwrap_or(0);
    Ok(json!({
        "project_url": ctx.project_url,
        "server_time": ctx.clock.now(),
        "time_scale": ctx.clock.scale(),
        "hosts": hosts_json(ctx, c)?,
        "batches": jb,
        "jobs": jobs,
        "files": files,
        "output_file_count": outputs,
    }))
}

async fn get_faults(ctx: web::Data<Ctx>) -> HttpResponse {
    HttpResponse::Ok().json(ctx.faults.plan())
}

async fn set_faults(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    let text = String::from_utf8_lossy(&body);
    match FaultPlan::from_json(&text) {
        Ok(plan) => {
            ctx.faults.set_plan(plan.clone());
            HttpResponse::Ok().json(plan)
        }
        Err(e) => bad_request(e),
    }
}

/// `POST __sim/users` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewUser {
    name: String,
    #[serde(default)]
    authenticator: Option<String>,
    #[serde(default)]
    submit_all: bool,
    #[serde(default)]
    apps: Vec<String>,
    #[serde(default)]
    no_submit: bool,
}

async fn add_user(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let u: NewUser = match serde_json::from_slice(&body) {
        Ok(u) => u,
        Err(e) => return bad_request(e),
    };
    if u.name.is_empty() {
        return bad_request("name must not be empty");
    }
    let mut app_ids = Vec::new();
    for a in &u.apps {
        match ctx.app_by_name(a) {
            Some(app) => app_ids.push(app.id),
            None => return bad_request(format!("unknown app {a}")),
        }
    }
    let auth = u.authenticator.clone().unwrap_or_else(crate::random_authenticator);
    let auth2 = auth.clone();
    let res = with_db(ctx, move |ctx, c| {
        if project_db::user_by_auth(c, &auth2)?.is_some() {
            return Ok(None);
        }
        let submit = (!u.no_submit).then_some((u.submit_all, app_ids.as_slice()));
        Ok(Some(project_db::create_user(c, &u.name, &auth2, ctx.clock.now(), submit)?))
    })
    .await;
    match res {
        Ok(Some(id)) => HttpResponse::Ok().json(json!({ "id": id, "authenticator": auth })),
        Ok(None) => bad_request("authenticator already in use"),
        Err(r) => r,
    }
}

/// The hosts with their behaviour now and the instance each is running.
fn hosts_json(ctx: &Ctx, c: &Connection) -> Res<Value> {
    let running: HashMap<i64, (i64, String)> = c
        .prepare_cached("SELECT host_id, id, name FROM result WHERE server_state = 4 ORDER BY id")?
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for h in ctx.hosts() {
        let mut v = serde_json::to_value(&h).unwrap_or(Value::Null);
        v["running"] = running.get(&h.id).map(|(id, name)| json!({ "id": id, "name": name })).unwrap_or(Value::Null);
        out.push(v);
    }
    Ok(Value::Array(out))
}

async fn get_hosts(ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    match with_db(ctx, hosts_json).await {
        Ok(v) => HttpResponse::Ok().json(v),
        Err(r) => r,
    }
}

/// `POST __sim/hosts` body: a host by `id` or `name`, and the behaviour
/// fields to change.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostChange {
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    name: Option<String>,
    flops: Option<f64>,
    error_rate: Option<f64>,
    straggler_rate: Option<f64>,
    straggler_factor: Option<f64>,
    lost_rate: Option<f64>,
    lie_rate: Option<f64>,
}

/// Changes one host's behaviour for the instances it gets from now on
/// (an instance it already has keeps its fate).
async fn set_host(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    let ch: HostChange = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return bad_request(e),
    };
    let mut hosts = ctx.hosts.lock().unwrap_or_else(|e| e.into_inner());
    let found = hosts.iter_mut().find(|h| Some(h.id) == ch.id || ch.name.as_deref() == Some(h.name.as_str()));
    let Some(h) = found else {
        return bad_request("no such host (give its \"id\" or \"name\")");
    };
    let mut b = h.behaviour;
    for (field, v) in [
        (&mut b.flops, ch.flops),
        (&mut b.error_rate, ch.error_rate),
        (&mut b.straggler_rate, ch.straggler_rate),
        (&mut b.straggler_factor, ch.straggler_factor),
        (&mut b.lost_rate, ch.lost_rate),
        (&mut b.lie_rate, ch.lie_rate),
    ] {
        if let Some(v) = v {
            *field = v;
        }
    }
    if let Err(e) = b.validate() {
        return bad_request(format!("host {}: {e}", h.name));
    }
    h.behaviour = b;
    tracing::info!(host = %h.name, ?b, "host behaviour changed");
    HttpResponse::Ok().json(&*h)
}

async fn get_clock(ctx: web::Data<Ctx>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "now": ctx.clock.now(), "time_scale": ctx.clock.scale() }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    advance: f64,
}

async fn advance_clock(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    match serde_json::from_slice::<Advance>(&body) {
        Ok(a) if a.advance.is_finite() && a.advance >= 0.0 => {
            ctx.clock.advance(a.advance);
            HttpResponse::Ok().json(json!({ "now": ctx.clock.now() }))
        }
        Ok(_) => bad_request("advance must be a non-negative number of seconds"),
        Err(e) => bad_request(e),
    }
}

async fn get_web(ctx: web::Data<Ctx>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "stopped": ctx.web_stopped() }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSwitch {
    stopped: bool,
}

/// `POST __sim/web {"stopped": true}`: the project's web stop flag.
async fn set_web(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    match serde_json::from_slice::<WebSwitch>(&body) {
        Ok(w) => {
            ctx.web_stopped.store(w.stopped, std::sync::atomic::Ordering::SeqCst);
            HttpResponse::Ok().json(json!({ "stopped": w.stopped }))
        }
        Err(e) => bad_request(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchZipSwitch {
    spoil: Option<crate::ctx::ZipSpoil>,
}

/// `POST __sim/batch_zip {"spoil": "corrupt"}` (or `escape`, `drop_first`,
/// `garbage`; `null` for none): how `get_output.php?cmd=batch_files` zips
/// are spoiled from now on.
async fn set_batch_zip(body: web::Bytes, ctx: web::Data<Ctx>) -> HttpResponse {
    match serde_json::from_slice::<BatchZipSwitch>(&body) {
        Ok(z) => {
            *ctx.batch_zip_spoil.lock().unwrap_or_else(|e| e.into_inner()) = z.spoil;
            HttpResponse::Ok().json(json!({ "spoil": z.spoil }))
        }
        Err(e) => bad_request(e),
    }
}
