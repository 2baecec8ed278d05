package nornmcp
