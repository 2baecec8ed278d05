package sqlite

// Dialect is the SQL dialect of ListInstances, for the plan tests.
var Dialect = dialect
