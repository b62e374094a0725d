"""The status table's columns, by title: what `status` shows and what a user's `columns` setting may
name (home/settings.py checks it without loading the tables)."""

# The status table's columns: (title, the JobRow field it shows), laid out as columns.py says.
JOB_COLUMNS = (("id", "id"), ("name", "name"), ("user", "user"), ("status", "status"), ("att", "attempt"),
               ("run", "run"), ("age", "age"), ("where", "where"), ("config", "overrides"),
               ("tags", "tags"), ("why / log", "info"), ("submitted", "submitted"))
JOB_COLUMN_TITLES = tuple(title for title, _ in JOB_COLUMNS)
# "submitted" (a clock time in the viewer's time zone) is shown only to those who ask for it
# (`jobtpu config set columns ...`).
DEFAULT_JOB_COLUMNS = JOB_COLUMN_TITLES[:-1]
