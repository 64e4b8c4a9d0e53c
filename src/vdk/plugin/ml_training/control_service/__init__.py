"""The VDK Control Service, as this plugin talks to it: where it is and who the user is (`endpoint`), its REST API
as the Control Service CLI uses it (`rest`), and the job's files as a deploy uploads them (`upload`). The service
is used as it ships: nothing here needs a change of its server."""
