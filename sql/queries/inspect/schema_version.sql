select max(id) as latest from :SCHEMA.migrations
