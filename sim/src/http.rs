//! HTTP glue: the project's URLs, reading POST bodies the way PHP does
//! (field `request` of a multipart or urlencoded form, file parts in
//! order), counting calls, fault injection around the scripts, and running
//! them on blocking threads.

use std::sync::Arc;

use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use rusqlite::Connection;

use crate::ctx::Ctx;
use crate::faults::{Fault, Peer};
use crate::form::{FilePart, Form};
use crate::replies::Reply;
use crate::rpc;

pub fn routes(cfg: &mut web::ServiceConfig, project: &str) {
    cfg.service(
        web::scope(&format!("/{project}"))
            .route("/submit_rpc_handler.php", web::route().to(submit_rpc_handler))
            .route("/job_file.php", web::route().to(job_file))
            .route("/get_output.php", web::route().to(get_output))
            .route("/server_status.php", web::get().to(server_status))
            .route("/get_project_config.php", web::get().to(project_config))
            .configure(crate::introspect::routes),
    );
}

fn too_large() -> HttpResponse {
    HttpResponse::PayloadTooLarge()
        .content_type("text/html; charset=iso-8859-1")
        .body("<html><body><h1>Request Entity Too Large</h1></body></html>\n")
}

/// Reads the body into a [`Form`]; `Err` is the response to give (body too
/// large).
async fn read_form(req: &HttpRequest, mut payload: web::Payload, ctx: &Ctx) -> Result<Form, HttpResponse> {
    let limit = ctx.cfg.max_request_bytes;
    let post_max = ctx.cfg.quirks.post_max_size;
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = declared.filter(|&n| post_max != 0 && n > post_max) {
        // PHP reads none of it; the web server then reads it to the end.
        let mut total = 0usize;
        while let Some(Ok(chunk)) = payload.next().await {
            total += chunk.len();
            if total > limit {
                return Err(too_large());
            }
        }
        return Ok(Form { dropped: Some(len), ..Form::default() });
    }
    let ctype = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if ctype.starts_with("multipart/form-data") {
        return read_multipart(req, payload, ctx).await;
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let Ok(chunk) = chunk else {
            return Ok(Form::default());
        };
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let mut form = Form::default();
    if ctype.starts_with("application/x-www-form-urlencoded") {
        for (k, v) in form_urlencoded::parse(&body) {
            if k == "request" {
                form.request = Some(v.into_owned().into_bytes());
            }
        }
    }
    Ok(form)
}

async fn read_multipart(req: &HttpRequest, payload: web::Payload, ctx: &Ctx) -> Result<Form, HttpResponse> {
    let limit = ctx.cfg.max_request_bytes;
    let max_files = ctx.cfg.quirks.max_file_uploads;
    let max_file = ctx.cfg.quirks.upload_max_filesize;
    let mut mp = actix_multipart::Multipart::new(req.headers(), payload);
    let mut form = Form::default();
    let mut total = 0usize;
    let mut file_parts_seen = 0usize;
    while let Some(field) = mp.next().await {
        // A broken body: PHP keeps what it could parse.
        let Ok(mut field) = field else { break };
        let (name, filename) = match field.content_disposition() {
            Some(cd) => (cd.get_name().unwrap_or("").to_string(), cd.get_filename().map(str::to_string)),
            None => (String::new(), None),
        };
        let mut data = BytesMut::new();
        let (mut broken, mut too_big) = (false, false);
        while let Some(chunk) = field.next().await {
            match chunk {
                Ok(chunk) => {
                    total += chunk.len();
                    if total > limit {
                        return Err(too_large());
                    }
                    // PHP stops keeping a file at upload_max_filesize.
                    too_big |= filename.is_some() && max_file != 0 && (data.len() + chunk.len()) as u64 > max_file;
                    if too_big {
                        data.clear();
                    } else {
                        data.extend_from_slice(&chunk);
                    }
                }
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        if broken {
            break;
        }
        match filename {
            Some(filename) => {
                file_parts_seen += 1;
                if max_files != 0 && file_parts_seen > max_files {
                    continue;
                }
                let part = FilePart { field: name.clone(), filename, data: data.freeze(), too_big };
                match form.files.iter_mut().find(|f| f.field == name) {
                    Some(existing) => *existing = part,
                    None => form.files.push(part),
                }
            }
            None if name == "request" => form.request = Some(data.to_vec()),
            None => {}
        }
    }
    Ok(form)
}

/// Counts the call, draws its fault, runs `work` on a blocking thread with
/// the database, and lets the fault spoil the reply.
async fn serve<F>(ctx: Arc<Ctx>, req: &HttpRequest, endpoint: String, work: F) -> HttpResponse
where
    F: FnOnce(&Ctx, &Connection) -> Reply + Send + 'static,
{
    ctx.count_call(&endpoint);
    let fault = ctx.faults.draw(&endpoint).watching(Peer::of(req));
    if let Some(resp) = fault.before().await {
        return resp;
    }
    let ctx2 = ctx.clone();
    let reply = web::block(move || {
        let c = ctx2.store.lock();
        work(&ctx2, &c)
    })
    .await;
    match reply {
        Ok(r) => respond(&fault, r),
        Err(e) => {
            tracing::error!(endpoint, error = %e, "handler failed");
            HttpResponse::InternalServerError().finish()
        }
    }
}

fn respond(fault: &Fault, r: Reply) -> HttpResponse {
    let headers: Vec<(&str, String)> = r.headers.iter().map(|(k, v)| (*k, v.clone())).collect();
    fault.after(r.status, r.content_type, Bytes::from(r.body), &headers)
}

async fn submit_rpc_handler(req: HttpRequest, payload: web::Payload, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let form = match read_form(&req, payload, &ctx).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let c2 = ctx.clone();
    let Ok(parsed) = web::block(move || rpc::parse_request(&c2, form.request.as_deref())).await else {
        return HttpResponse::InternalServerError().finish();
    };
    let endpoint = rpc::endpoint("submit_rpc_handler.php", &parsed);
    serve(ctx, &req, endpoint, move |ctx, c| rpc::submit_rpc::handle(ctx, c, parsed)).await
}

async fn job_file(req: HttpRequest, payload: web::Payload, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let mut form = match read_form(&req, payload, &ctx).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let c2 = ctx.clone();
    let request = form.request.take();
    let Ok(parsed) = web::block(move || rpc::parse_request(&c2, request.as_deref())).await else {
        return HttpResponse::InternalServerError().finish();
    };
    let endpoint = rpc::endpoint("job_file.php", &parsed);
    serve(ctx, &req, endpoint, move |ctx, c| rpc::job_file::handle(ctx, c, parsed, &form)).await
}

async fn get_output(req: HttpRequest, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let q = rpc::get_output::parse_query(req.query_string());
    let endpoint = format!("get_output.php:{}", rpc::get_output::command(&q));
    serve(ctx, &req, endpoint, move |ctx, c| rpc::get_output::handle(ctx, c, &q)).await
}

async fn server_status(req: HttpRequest, ctx: web::Data<Ctx>) -> HttpResponse {
    let ctx = ctx.into_inner();
    let query = req.query_string().to_string();
    serve(ctx, &req, "server_status.php".into(), move |ctx, _| {
        crate::server_status::page(ctx, &query).unwrap_or_else(|| Reply {
            status: actix_web::http::StatusCode::NOT_FOUND,
            ..Reply::ok(crate::replies::HTML_CONTENT_TYPE, "the sim serves server_status.php?xml=1 only\n")
        })
    })
    .await
}

async fn project_config(req: HttpRequest, ctx: web::Data<Ctx>) -> HttpResponse {
    serve(ctx.into_inner(), &req, "get_project_config.php".into(), |ctx, _| crate::server_status::project_config(ctx)).await
}
