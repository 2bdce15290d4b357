// The Drizzle schema of docs/clients.md: the key is a bigint that Drizzle hands over as a
// JavaScript BigInt (mode 'bigint'), made by the database (DEFAULT snowflake_next()).
// drizzle/migrations/ was written from it by drizzle-kit 0.31.11 (drizzle.config.js).
'use strict';
const { sql } = require('drizzle-orm');
const { bigint, pgTable, text } = require('drizzle-orm/pg-core');

const orders = pgTable('orders', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`snowflake_next()`),
  customer: text('customer').notNull(),
});

module.exports = { orders };
