"""What depends on the database, on SQLite, MariaDB and PostgreSQL."""
