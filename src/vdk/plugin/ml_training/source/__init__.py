"""The job directory's code: which files it holds (job_files, ignore_rules), what the code imports
(import_check), whether it starts its own workers (spawn_scan), and which commit it is (audit)."""
