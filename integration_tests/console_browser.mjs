// The operator's console in a real browser (Debian's Chromium, headless, driven by
// puppeteer-core), as integration_tests/console_test.cc sets it up: the console behind the
// shipped nginx (TLS, a throwaway certificate), an address the sandbox bounced. A person's
// path: a stranger gets the sign-in form and nothing else; the operator signs in, searches the
// address, sees its email's timeline with the bounce and the suppression, removes it with a
// reason, and looks at the group's page, whose charts' figures are printed for the test to
// compare with the database; a group's operator sees its group only. Each step leaves a
// screenshot in SHOTS. Prints `FACT name=value` lines; exits 1 at the first failed check.
//
// Environment: CONSOLE (https://127.0.0.1:PORT), OPERATOR_TOKEN, GROUP_TOKEN, ADDRESS, SHOTS,
// PUPPETEER (the puppeteer-core package directory), CHROMIUM (the browser).
import { join } from 'node:path';

const env = process.env;
const { default: puppeteer } = await import(join(env.PUPPETEER, 'lib/esm/puppeteer/puppeteer-core.js'));

let shot = 0;
function check(ok, what) {
  if (!ok) {
    console.log(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok   ${what}`);
}
async function snap(page, name) {
  const path = join(env.SHOTS, `${String(++shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`shot ${path}`);
}
// The text of `selector`'s element; "" (and the page's HTML on stderr) when there is none.
async function text(page, selector) {
  const e = await page.$(selector);
  if (e === null) {
    console.error(`no ${selector} on ${page.url()}:\n${await page.content()}`);
    return '';
  }
  return page.evaluate(x => x.textContent, e);
}
async function signIn(page, token) {
  await page.goto(env.CONSOLE + '/', { waitUntil: 'load' });
  await page.type('#token', token);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#signin')]);
}

const browser = await puppeteer.launch({
  executablePath: env.CHROMIUM,
  headless: true,
  acceptInsecureCerts: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
});
try {
  // A stranger: the sign-in form; a page behind it sends them back there.
  const stranger = await (await browser.createBrowserContext()).newPage();
  await stranger.goto(env.CONSOLE + '/', { waitUntil: 'load' });
  check(await stranger.$('#token') !== null, 'a stranger gets the sign-in form');
  await stranger.goto(`${env.CONSOLE}/emails?group=mailroom&address=${encodeURIComponent(env.ADDRESS)}`,
                      { waitUntil: 'load' });
  check(await stranger.$('#token') !== null && !(await stranger.content()).includes('bounced'),
        'a stranger asking for an address is sent to the sign-in form');
  await stranger.type('#token', 'not-a-token-of-ours-0123456789');
  const [refused] = await Promise.all([stranger.waitForNavigation({ waitUntil: 'load' }),
                                       stranger.click('#signin')]);
  check(refused.status() === 403 && (await text(stranger, '#notice')).includes('not an operator'),
        'a wrong token is refused');
  await snap(stranger, 'stranger');

  // The operator of every group.
  const page = await (await browser.createBrowserContext()).newPage();
  await signIn(page, env.OPERATOR_TOKEN);
  check(await page.$('#hourly') !== null, 'the operator signs in to the group page');
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }),
                     page.click('header nav a[href="/?group=mailroom"]')]);
  check((await text(page, 'header nav strong')) === 'mailroom', 'the operator picks a group');
  await snap(page, 'group');
  await page.type('#address', env.ADDRESS);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#search')]);
  const events = await page.$$eval('li.event', lis => lis.map(li => li.dataset.event));
  console.log(`FACT timeline=${events.join(',')}`);
  check(events.includes('sent') && events.includes('bounced'),
        'the email\'s timeline shows its try and the bounce');
  check((await text(page, '#suppression')).includes('Suppressed: hard_bounce'),
        'the address shows as suppressed');
  await snap(page, 'address');
  await page.type('#suppression input[name=reason]', 'user fixed the mailbox');
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }),
                     page.click('#suppression button.remove')]);
  check((await text(page, '#notice')).includes('Removed the suppression'),
        'the suppression is removed');
  check((await text(page, '#suppression')).includes('Not suppressed'),
        'the address is no longer suppressed');
  await snap(page, 'removed');

  // The group page's charts, with the figures they draw.
  await page.goto(env.CONSOLE + '/?group=mailroom', { waitUntil: 'load' });
  const bars = await page.$$eval('#hourly rect.sent', rs => rs.map(r => ({
    hour: r.dataset.hour, sent: Number(r.dataset.sent), bounced: Number(r.dataset.bounced),
    height: Number(r.getAttribute('height')) })));
  check(bars.length === 24, 'the hourly chart has 24 bars');
  const sent = bars.reduce((a, b) => a + b.sent, 0);
  const bounced = bars.reduce((a, b) => a + b.bounced, 0);
  const tallest = bars.reduce((a, b) => (b.sent > a.sent ? b : a));
  check(tallest.height > 100, 'the busiest hour is drawn as the tallest bar');
  console.log(`FACT hourly_sent=${sent}`);
  console.log(`FACT hourly_bounced=${bounced}`);
  const budget = await page.$eval('#budget', e => ({ ...e.dataset }));
  console.log(`FACT budget=${budget.budget} committed=${budget.committed} spent=${budget.spent} pace=${budget.pace}`);
  const box = await page.$eval('#budget rect.committed', r => Number(r.getAttribute('width')));
  console.log(`FACT committed_width=${box}`);
  const trouble = await page.$$eval('#trouble tr', rs => rs.length - 1);
  console.log(`FACT trouble_rows=${trouble}`);
  await snap(page, 'charts');

  // A group's operator: its group only, and no suppression list.
  const scoped = await (await browser.createBrowserContext()).newPage();
  await signIn(scoped, env.GROUP_TOKEN);
  const links = await scoped.$$eval('header nav a', as => as.map(a => a.textContent));
  check(links.length === 1 && links[0] === 'audit', 'a group\'s operator sees its group only');
  check(!(await scoped.content()).includes('Suppressed addresses'),
        'a group\'s operator gets no suppression list');
  const other = await scoped.goto(`${env.CONSOLE}/emails?group=mailroom&address=${encodeURIComponent(env.ADDRESS)}`);
  check(other.status() === 403, 'a group\'s operator is refused another group\'s addresses');
  await snap(scoped, 'scoped');
  console.log('PASS');
} finally {
  await browser.close();
}
