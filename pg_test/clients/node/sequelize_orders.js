// Sequelize 6 and idgen (docs/clients.md): a migration (the queryInterface calls a sequelize-cli
// migration makes) creates the extension and the table with DEFAULT snowflake_next(), the model
// inserts with create() and bulkCreate(), and the keys come back as strings, exact; then every row
// is read back a page at a time, the key as the cursor. Prints one JSON line.
//   node sequelize_orders.js <socket dir> <port> <database>
'use strict';
const { DataTypes, Op, Sequelize } = require('sequelize');

async function main([host, port, database]) {
  const sequelize = new Sequelize({ dialect: 'postgres', host, port: Number(port), database,
                                    username: 'postgres', logging: false });
  // the migration: the functions the DEFAULT calls, then the table
  const qi = sequelize.getQueryInterface();
  await sequelize.query('CREATE EXTENSION IF NOT EXISTS idgen');
  await qi.createTable('orders', {
    id: { type: DataTypes.BIGINT, primaryKey: true, defaultValue: Sequelize.literal('snowflake_next()') },
    customer: { type: DataTypes.TEXT, allowNull: false },
  });
  // the model: without a defaultValue Sequelize sends id = NULL; with it, snowflake_next() is
  // written into each row of the INSERT
  const Order = sequelize.define('Order', {
    id: { type: DataTypes.BIGINT, primaryKey: true, defaultValue: Sequelize.literal('snowflake_next()') },
    customer: { type: DataTypes.TEXT, allowNull: false },
  }, { tableName: 'orders', timestamps: false });
  const one = await Order.create({ customer: 'ada' });  // one.id: a string
  const rows = Array.from({ length: 1000 }, (_, i) => ({ customer: `c${i}` }));
  const many = await Order.bulkCreate(rows, { returning: ['id'] });  // every key
  // latest first, 100 a page: the last key of a page is the cursor of the next
  const pages = [];
  for (let cursor; ;) {
    const page = await Order.findAll({ attributes: ['id'], where: cursor === undefined ? {} : { id: { [Op.lt]: cursor } },
                                       order: [['id', 'DESC']], limit: 100 });
    if (page.length === 0) break;
    pages.push(page.map((r) => r.id));
    cursor = page[page.length - 1].id;
  }
  await sequelize.close();
  console.log(JSON.stringify({ one: one.id, many: many.map((r) => r.id), pages, type: typeof one.id }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
