"""A sweep's report: its jobs found (discovery), their numbers (statistics), its files and
dashboards (outputs), and the command (command)."""
