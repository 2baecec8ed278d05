// Package querysql builds the SQL of Store.ListInstances for the SQL
// drivers, which differ only in placeholders, index hints and how they read
// a field of a JSON input.
//
// Every statement orders by (created_at, id) descending and continues a
// page with a row-value comparison on those columns, so that it reads its
// page from one index range whatever the table's size: the plain listing
// from (created_at, id) (or status by status, for a driver without it), a
// workflow's instances from (workflow, status, created_at, id), a status
// from (status, created_at, id), a parent's children from (parent,
// created_at, id). Several statuses (or a workflow without statuses, which
// stands for all of them) become one branch per status, each reading at
// most a page of keys from its own index range, merged by an outer ORDER
// BY, and only the page's rows are then read whole: an IN list would make
// the database read every matching row to sort them.
//
//	q, args := querysql.Instances(sqliteDialect, rowcodec.InstanceColumns, query)
package querysql
