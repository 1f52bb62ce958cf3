//! The BLAH_* front end (`grid_resource = batch boinc`): the dispatcher
//! (`jobs`: BlahJobs), the typed job its submit ad is read into (`job`),
//! one actor per BOINC project on that project's tree
//! (`project_jobs`: ProjectJobs), the job's mapping to BOINC (`map`, pure;
//! its inputs' IO in `input_files`), the output
//! delivery (`outputs`) and the durable job records (`job_records`).

#![forbid(unsafe_code)]

pub mod batch_zip;
mod commands;
pub mod container_image;
pub mod input_files;
pub mod job;
pub mod job_records;
pub mod jobs;
pub mod map;
pub mod map_error;
pub mod outputs;
pub mod placement;
pub mod project_jobs;
pub mod runner;
pub mod sequence_ad;
pub mod sequence_settings;
pub mod shared_batch;
pub mod url_inputs;
