CREATE TABLE "orders" (
	"id" bigint PRIMARY KEY DEFAULT snowflake_next() NOT NULL,
	"customer" text NOT NULL
);
