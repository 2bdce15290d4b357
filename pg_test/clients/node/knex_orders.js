// Knex and idgen (docs/clients.md): the extension made with knex.raw, the table by Knex's schema
// builder with DEFAULT snowflake_next(), rows inserted with returning('id'), the keys read back
// as node-postgres hands them over: strings, exact. Prints one JSON line.
//   node knex_orders.js <socket dir> <port> <database>
'use strict';

async function main([host, port, database]) {
  const connection = { host, port: Number(port), database, user: 'postgres' };
  const knex = require('knex')({ client: 'pg', connection });
  // the functions the DEFAULT calls, before the table
  await knex.raw('CREATE EXTENSION IF NOT EXISTS idgen');
  await knex.schema.createTable('orders', (t) => {
    t.bigInteger('id').primary().defaultTo(knex.raw('snowflake_next()'));
    t.text('customer').notNullable();
  });
  // insert ... returning: node-postgres hands a bigint over as a string, and Knex passes it on
  const [one] = await knex('orders').insert({ customer: 'ada' }).returning('id');  // one.id: a string
  const rows = Array.from({ length: 1000 }, (_, i) => ({ customer: `c${i}` }));
  const many = await knex('orders').insert(rows).returning('id');  // every key
  await knex.destroy();
  console.log(JSON.stringify({ one: one.id, many: many.map((r) => r.id), type: typeof one.id }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
