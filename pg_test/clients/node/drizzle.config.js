// drizzle-kit's configuration for drizzle/migrations/ (docs/clients.md). drizzle-kit is a
// development tool, not installed by the tests: `npx drizzle-kit@0.31.11 generate` writes a
// migration from drizzle/schema.js, and `generate --custom --name idgen` wrote the first, empty
// one, into which CREATE EXTENSION went (drizzle-kit writes no CREATE EXTENSION itself).
module.exports = {
  dialect: 'postgresql',
  schema: './drizzle/schema.js',
  out: './drizzle/migrations',
};
